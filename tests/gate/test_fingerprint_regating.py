"""The fingerprint check under re-gating: users gate, add trials and gate again.

The check FAILs on the union of the anytime shift test (valid at every count of pairs) and
Hotelling's T² on the first 50 pairs (one look fixed by the data), each at half the level,
so gating again adds no chance of a false block. These tests read the whole gate (pass
rate, regression and fingerprint in one family) at several looks, and the command line on
a lake that grows between gates."""

from __future__ import annotations

import json

import numpy as np

from otel_assay.gate import GateConfig
from otel_assay.gate.fingerprint import FIRST_LOOK_PAIRS
from tests.stats.bands import max_events, min_events
from tests.stats.fingerprint_sim import simulate_fingerprints
from tests.stats.gate_fingerprint_sim import FEATURES, gate_fingerprints

from .conftest import cli
from .core import Scenario, judge
from .lakes import write_trials

LOOKS = tuple(range(10, 101, 10))


def _prefix(s: Scenario, n: int) -> Scenario:
    return Scenario(s.name, s.outcomes_b[:n], s.outcomes_c[:n], s.fingerprints_b[:n], s.fingerprints_c[:n])


def test_an_unchanged_agent_is_blocked_at_most_alpha_however_often_it_is_gated():
    """One scenario (pass rate, regression and fingerprint gating; the gate's default
    columns, heavy-tailed tokens), read at 1 look (100 trials per arm), 3 looks (20, 50, 100)
    and 10 looks (10, 20, ..., 100): P(block at any look) <= alpha. With T² read at every
    look the fingerprint alone blocked about 0.2 of such runs at 10 looks, beyond this band
    (bench/bench_gate_regating.py measures 3 scenarios up to 200 trials)."""
    reps, alpha = 300, 0.05
    rng = np.random.default_rng(40)
    cfg = GateConfig(threshold=0.7)
    hits = {1: 0, 3: 0, 10: 0}
    for _ in range(reps):
        n = LOOKS[-1]
        full = Scenario("s", rng.random(n) < 0.8, rng.random(n) < 0.8, gate_fingerprints(rng, n),
                        gate_fingerprints(rng, n))
        blocked = {k: judge([_prefix(full, k)], cfg, list(FEATURES))[0] == "block" for k in LOOKS}
        hits[1] += blocked[100]
        hits[3] += blocked[20] or blocked[50] or blocked[100]
        hits[10] += any(blocked.values())
    assert hits[1] <= hits[3] <= hits[10] <= max_events(reps, alpha), hits


def test_a_regression_still_blocks_when_regated():
    # the pass rate drops from 0.9 to 0.5, the behaviour does not change: gated at 20, 40 and 60
    # trials per arm, the last gate blocks
    reps, n = 40, 60
    rng = np.random.default_rng(12)
    blocked = 0
    for _ in range(reps):
        full = Scenario("s", rng.random(n) < 0.9, rng.random(n) < 0.5, gate_fingerprints(rng, n),
                        gate_fingerprints(rng, n))
        decisions = [judge([_prefix(full, k)], GateConfig(), list(FEATURES))[0] for k in (20, 40, 60)]
        blocked += decisions[-1] == "block"
    assert blocked >= min_events(reps, 0.85)


def test_the_tool_mix_shift_keeps_its_power_at_50_trials_per_arm():
    """Tool A picked .5 -> .35 of the time (the Hotelling power test's shift), 50 trials per
    arm: the fingerprint check FAILed 0.81 of 200 such gates when it was T² at every look, 0.75
    with the T² look at half the level (the anytime test alone: about 0.5)."""
    reps, n = 200, FIRST_LOOK_PAIRS
    rng = np.random.default_rng(21)
    fails = 0
    for _ in range(reps):
        sc = [Scenario("s", rng.random(n) < 0.8, rng.random(n) < 0.8, simulate_fingerprints(rng, n),
                       simulate_fingerprints(rng, n, p_tool_a=0.35))]
        fails += judge(sc, GateConfig())[1][0].check("fingerprint").verdict == "FAIL"
    assert fails >= min_events(reps, 0.65), fails


def test_a_fingerprint_fail_once_reached_stays_when_trials_are_added(tmp_path):
    """The command line on a lake that grows between gates: the candidate calls a second tool
    on every other trial. Trials pair by index, so added trials never change earlier pairs:
    the pair count at which the anytime test first FAILed is the same at every later gate."""
    lake = tmp_path / "lake"

    def batch(start: int, stop: int) -> None:
        trials = [{"scenario": "s", "version": "v1", "outcome": "pass", "tools": ["lookup"], "index": i}
                  for i in range(start, stop)]
        trials += [{"scenario": "s", "version": "v2", "outcome": "pass", "index": i,
                    "tools": ["lookup", "search"] if i % 2 == 0 else ["lookup"]} for i in range(start, stop)]
        write_trials(lake, trials, seed=start)

    seen = []
    for k, (start, stop) in enumerate(((0, 5), (5, 40), (40, 80))):
        batch(start, stop)
        report = tmp_path / f"gate{k}.json"
        p = cli("gate", lake, "--baseline", "version=v1", "--candidate", "version=v2", "--json", report)
        doc = json.loads(report.read_text())
        (fp,) = [c for s in doc["scenarios"] for c in s["checks"] if c["name"] == "fingerprint"]
        seen.append((p.returncode, fp["verdict"], fp["stats"]["n_pairs"], fp["stats"]["fail_at"]))
    assert [s[2] for s in seen] == [5, 40, 80], seen
    assert seen[0][1] != "FAIL" and seen[0][0] != 1, seen
    assert [s[1] for s in seen[1:]] == ["FAIL", "FAIL"] and [s[0] for s in seen[1:]] == [1, 1], seen
    # the same trials give the same pairs: the anytime test's first FAIL does not move
    assert seen[1][3] is not None and seen[1][3] == seen[2][3], seen
