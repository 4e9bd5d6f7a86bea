"""The whole gate under re-gating: how often it blocks an unchanged agent when users gate,
add trials and gate again, and how often its fingerprint check FAILs a shifted one.

Prints one JSON line (fixed seeds; about 8 minutes at 300 and 150 reps on a shared core).
The gate is the real check functions, family and decision (tests/gate/core.py ``judge``:
regression and fingerprint of 3 scenarios, one Holm family), on synthetic trials: outcomes pass at 0.8, fingerprints with
the gate's default columns (tests/stats/gate_fingerprint_sim.py).

- ``aa``: P(block | no change) at 1 look (200 trials per arm), 3 looks (20, 100, 200) and
  10 looks (20, 40, ..., 200), blocking when any look blocks.
- ``power``: P(the fingerprint check FAILs) in one shifted scenario of the 3, at 50 and
  100 trials per arm (one look each).

Run it on another checkout (PYTHONPATH) to compare with that version of the gate.
Usage: python bench/bench_gate_regating.py [aa_reps] [power_reps]
"""

import json
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from otel_assay.gate import GateConfig  # noqa: E402
from tests.gate.core import Scenario, judge  # noqa: E402
from tests.stats.fingerprint_sim import simulate_fingerprints  # noqa: E402
from tests.stats.gate_fingerprint_sim import FEATURES, gate_fingerprints  # noqa: E402

LOOKS = tuple(range(20, 201, 20))
SHIFTS = {
    "tool A .5 -> .35": None,  # the Hotelling power test's shift, on its own columns
    "one more tool call on 60 %": {"extra_tool": 0.6},
    "tokens +50 %": {"token_factor": 1.5},
    "errors .05 -> .25": {"error_rate": 0.25},
    "only better: tokens -30 %, errors .05 -> .02": {"token_factor": 0.7, "error_rate": 0.02},
}


def _scenarios(rng, n, shift=False, kw=None, tool=False):
    make = (lambda k, **_: simulate_fingerprints(rng, k)) if tool else (lambda k, **a: gate_fingerprints(rng, k, **a))
    out = []
    for i in range(3):
        fb = make(n)
        if shift and i == 0:
            fc = simulate_fingerprints(rng, n, p_tool_a=0.35) if tool else gate_fingerprints(rng, n, **kw)
        else:
            fc = make(n)
        out.append(Scenario(f"s{i}", rng.random(n) < 0.8, rng.random(n) < 0.8, fb, fc))
    return out


def _prefix(scenarios, n):
    return [Scenario(s.name, s.outcomes_b[:n], s.outcomes_c[:n], s.fingerprints_b[:n], s.fingerprints_c[:n])
            for s in scenarios]


def main(aa_reps: int = 300, power_reps: int = 150) -> None:
    t0 = time.perf_counter()
    cfg = GateConfig()
    rng = np.random.default_rng(40)
    hits = {"1": 0, "3": 0, "10": 0}
    for _ in range(aa_reps):
        full = _scenarios(rng, LOOKS[-1])
        blocked = {n: judge(_prefix(full, n), cfg, list(FEATURES))[0] == "block" for n in LOOKS}
        hits["1"] += blocked[200]
        hits["3"] += blocked[20] or blocked[100] or blocked[200]
        hits["10"] += any(blocked.values())
    power = {}
    for name, kw in SHIFTS.items():
        tool = kw is None
        power[name] = {}
        for n in (50, 100):
            rng = np.random.default_rng(41)
            fails = 0
            for _ in range(power_reps):
                sc = _scenarios(rng, n, shift=True, kw=kw, tool=tool)
                names = None if tool else list(FEATURES)
                _, results, _ = judge(sc, cfg, names)
                fails += results[0].check("fingerprint").verdict == "FAIL"
            power[name][str(n)] = round(fails / power_reps, 3)
    print(json.dumps({"bench": "gate_regating", "aa_reps": aa_reps, "power_reps": power_reps,
                      "aa": {k: round(v / max(aa_reps, 1), 3) for k, v in hits.items()}, "power": power,
                      "seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
