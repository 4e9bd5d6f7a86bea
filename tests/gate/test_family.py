"""One multiple-testing family for the whole gate: the FAIL tests of every gating check in
every scenario are corrected together, because a FAIL of any of them blocks."""

from __future__ import annotations

import numpy as np
import pytest

from otel_assay.gate import GateConfig, run_gate
from otel_assay.report.json_report import report_dict
from tests.stats.bands import max_events, min_events
from tests.stats.fingerprint_sim import simulate_fingerprints

from .core import Scenario, judge
from .lakes import write_trials


@pytest.fixture(scope="module")
def borderline_lake(tmp_path_factory):
    """One scenario: the baseline passes 40/40, the candidate 33/40, failing its first 7 trials
    (anytime p = 0.031): significant alone, not once a second test shares the family. The
    fingerprints of both arms come from one distribution."""
    trials = [{"scenario": "s", "version": "v1", "outcome": "pass"} for _ in range(40)]
    trials += [{"scenario": "s", "version": "v2", "outcome": "fail" if i < 7 else "pass"} for i in range(40)]
    # seeded ids: the permutation p-value of the fingerprint test depends on the trials' order
    return write_trials(tmp_path_factory.mktemp("family") / "lake", trials, seed=3, id_seed=5)


@pytest.mark.parametrize("correction,factor,decision", [
    ("none", 1.0, "block"),         # regression FAILs on its own p-value, as before any correction
    ("holm", 2.0, "manual"),        # family {regression, fingerprint}: the smaller p-value x 2
    ("bonferroni", 2.0, "manual"),
    ("bh", 2.0, "manual"),          # the smaller of two p-values: x 2 / 1 as well
])
def test_regression_and_fingerprint_share_one_family(borderline_lake, correction, factor, decision):
    r = run_gate(borderline_lake, GateConfig(correction=correction), baseline="version=v1", candidate="version=v2")
    reg, fp = r.scenarios[0].check("regression"), r.scenarios[0].check("fingerprint")
    assert reg.stats["pvalue"] == pytest.approx(0.0313, abs=1e-4)
    # unchanged fingerprints: the regression is the smaller p-value, by more than the factor 2
    # (so that each method adjusts it to exactly 2p; the lake's seeded ids fix this p-value)
    assert fp.stats["pvalue"] > 2 * reg.stats["pvalue"]
    # corrected per check (the old scheme) the regression would be a family of one and block
    assert reg.stats["pvalue_adjusted"] == pytest.approx(factor * reg.stats["pvalue"])
    assert r.decision == decision, r.reasons
    assert r.family == {"method": correction, "alpha": 0.05, "size": 2,
                        "controls": {"none": None, "bh": "FDR"}.get(correction, "FWER"),
                        "tests": {"regression": 1, "fingerprint": 1}}
    assert report_dict(r)["family"] == r.family


def test_report_only_checks_stay_out_of_the_family(borderline_lake):
    # a threshold adds the pass-rate test; stability gates nothing by default and has no test
    r = run_gate(borderline_lake, GateConfig(threshold=0.5), baseline="version=v1", candidate="version=v2")
    assert r.family["tests"] == {"pass_rate": 1, "regression": 1, "fingerprint": 1}
    assert r.scenarios[0].check("stability").gating is False
    off = GateConfig(threshold=0.5)
    off.checks.update(fingerprint=False)
    r = run_gate(borderline_lake, off, baseline="version=v1", candidate="version=v2")
    assert r.family["tests"] == {"pass_rate": 1, "regression": 1}


def _unchanged(rng, scenarios: int, n: int, rate: float) -> list[Scenario]:
    return [Scenario(f"s{i}", rng.random(n) < rate, rng.random(n) < rate,
                     simulate_fingerprints(rng, n), simulate_fingerprints(rng, n)) for i in range(scenarios)]


def test_an_unchanged_candidate_is_blocked_at_most_alpha_of_the_time():
    """Baseline and candidate from one distribution (pass rate 0.5, at the threshold 0.5),
    3 scenarios, pass_rate, regression and fingerprint all gating: the gate's false-block
    rate is the family-wise error of the one family, <= alpha. Corrected per check, as
    before, the same draws blocked about 3 alpha / 2 of the time (seed 11: 125 of 1500; 44 now),
    beyond the band below."""
    reps, alpha = 1500, 0.05
    rng = np.random.default_rng(11)
    cfg = GateConfig(pairing="off", threshold=0.5)
    blocked = sum(judge(_unchanged(rng, 3, 40, 0.5), cfg)[0] == "block" for _ in range(reps))
    assert blocked <= max_events(reps, alpha)
    assert max_events(reps, alpha) / reps < 0.073


def test_a_clear_regression_still_blocks():
    # one of three scenarios drops from 0.9 to 0.5, and the family holds 6 tests. The test valid
    # at every look pays for it at a single one: at 40 trials per arm it blocked 72 % of these
    # runs (Fisher, valid at one look only, 90 %); at 60, 94 %
    reps, n = 200, 60
    rng = np.random.default_rng(12)
    cfg = GateConfig(pairing="off")
    blocked = 0
    for _ in range(reps):
        sc = _unchanged(rng, 3, n, 0.9)
        sc[0].outcomes_c = rng.random(n) < 0.5
        blocked += judge(sc, cfg)[0] == "block"
    assert blocked >= min_events(reps, 0.9)


def test_a_plain_shift_fails_in_a_family_of_a_thousand_tests():
    """100 scenarios x (regression, fingerprint) is a family of 200 tests: Holm holds the
    smallest p-value to 0.05 / 200, and a scenario whose behaviour plainly changed still
    FAILs. Before the fingerprint test was valid under re-gating this ran 500 scenarios at
    10 trials per arm (permutation T²); its one T² look now comes at 50 pairs, by the F
    reference, whose far tail is not exact for these skewed features (one of 500 unchanged
    scenarios reached p = 1.8e-5 there), and the anytime test alone cannot reach 2 x 200 /
    0.05 in 10 pairs (test_the_permutation_count_policy keeps the permutation count growing
    with the family)."""
    rng = np.random.default_rng(13)
    n = 50
    scenarios = _unchanged(rng, 100, n, 0.5)
    scenarios[0].fingerprints_c = simulate_fingerprints(rng, n, p_tool_a=0.95)
    decision, results, family = judge(scenarios, GateConfig(pairing="off"))
    assert family["size"] == 200
    fp = results[0].check("fingerprint")
    assert fp.verdict == "FAIL" and decision == "block", fp.reason
    assert fp.stats["t2_counts"] and fp.stats["pvalue"] < 0.05 / 200
    assert sum(r.check("fingerprint").verdict == "FAIL" for r in results) == 1


def test_one_failed_trial_is_not_a_threshold_fail(tmp_path):
    # 0/1 at threshold 0.9: an agent at 0.9 fails one trial with probability 0.1 > alpha, and
    # so four in a row still happen too often for an agent that might be at 0.9 to be
    # blocked at every look; five FAIL
    from otel_assay.gate import run_verdict

    for fails, decision in ((1, "manual"), (4, "manual"), (5, "block")):
        lake = write_trials(tmp_path / f"lake{fails}", [{"scenario": "s", "version": "v1", "outcome": "fail"}] * fails)
        r = run_verdict(lake, GateConfig(threshold=0.9))
        c = r.scenarios[0].check("pass_rate")
        assert r.decision == decision, (fails, c.reason)
        assert c.verdict == ("FAIL" if decision == "block" else "INCONCLUSIVE")
        if decision == "manual":
            assert "holds the threshold 0.9: more trials decide" in c.reason, c.reason


def test_the_permutation_count_policy():
    from otel_assay.gate.family import Family as _Family
    from otel_assay.gate.fingerprint import MAX_PERMUTATIONS, permutations as _permutations

    holm = _Family(0.05, "holm")
    assert _permutations(9999, holm.level(2)) == 9999  # small suites keep the configured count
    assert _permutations(9999, holm.level(200)) == 39999  # floor 1/40000 = a tenth of 0.05/200
    assert _permutations(9999, holm.level(1000)) == MAX_PERMUTATIONS == 199_999
    assert _permutations(500_000, holm.level(1000)) == 500_000  # a larger configured count is kept
    by = _Family(0.05, "by")
    assert by.level(100) == pytest.approx(0.05 / (100 * sum(1 / j for j in range(1, 101))))
    assert _Family(0.05, "none").level(1000) == 0.05 and _Family(0.05, "bh").level(10) == 0.005


def test_fingerprint_power_figures_are_at_the_family_level():
    """The critical T² and the smallest detectable shift describe the test the gate runs:
    at the level the family holds its strictest test to (alpha / m for Holm), not at alpha.
    At alpha they claimed shifts the gate would not block on, and a T² past the plotted
    critical value could PASS. Past the family-level critical value a T² FAILs."""
    from scipy.special import fdtri

    from otel_assay import stats

    rng = np.random.default_rng(5)
    n = 150  # >= 100 trials per arm: the F reference, which the critical value comes from
    seen_fail_past_critical = 0
    for rep in range(6):
        # scenario 0 shifts (p_tool_a 0.5 -> 0.65: at the T² look's 50 pairs some runs FAIL,
        # some not), the others are unchanged
        scenarios = [Scenario(f"s{i}", rng.random(n) < 0.9, rng.random(n) < 0.9, simulate_fingerprints(rng, n),
                              simulate_fingerprints(rng, n, p_tool_a=0.65 if i == 0 else 0.5)) for i in range(3)]
        _, results, family = judge(scenarios, GateConfig(pairing="off"))
        m = family["size"]
        assert m == 6  # regression and fingerprint in 3 scenarios
        for r in results:
            fp = r.check("fingerprint")
            st = fp.stats
            # the T² look: on the first 50 pairs, at half the family's level (the other half
            # is the anytime test's)
            k, level = 50, 0.05 / m / 2
            assert st["method"] == "F" and st["t2_pairs"] == st["n_baseline"] == k and st["n_pairs"] == n
            assert st["power_level"] == pytest.approx(level)
            d1, d2 = st["df"]
            assert st["t2_critical"] == pytest.approx(fdtri(d1, d2, 1 - level) * (2 * k - 2) * d1 / d2)
            assert st["min_detectable_shift"] == pytest.approx(
                stats.hotelling_detectable_shift(k, k, st["d_eff"], level, r.settings.beta))
            assert st["min_detectable_shift"] > stats.hotelling_detectable_shift(k, k, st["d_eff"], 0.05,
                                                                                r.settings.beta)
            if st["t2"] > st["t2_critical"]:
                assert fp.verdict == "FAIL", (rep, r.scenario, st)
                seen_fail_past_critical += 1
            if fp.verdict == "PASS":
                assert f"smallest shift the 50-pair T² look detects {st['min_detectable_shift']:.2f} SD" in fp.reason
    assert seen_fail_past_critical >= 1


def test_interrupted_trials_stay_out_of_the_fingerprint_test(tmp_path):
    # the candidate behaves as the baseline, but a human paused a third of its runs after the
    # first model call: cut short, not changed. In the shift test they read as a tool-usage
    # shift. Trials pair by index, and the interrupted ones are spread over the run (each
    # arm's extra trials wait for a partner, so they must have one to be seen at all)
    full = ["lookup", "refund"]
    n = 60
    cut = {i for i in range(n) if i % 3 == 2}
    trials = ([{"scenario": "s", "version": "v1", "outcome": "pass", "tools": full, "index": i} for i in range(n)]
              + [{"scenario": "s", "version": "v2", "outcome": "pass", "tools": full, "index": i}
                 if i not in cut else
                 {"scenario": "s", "version": "v2", "outcome": None, "tools": [], "error_class": "interrupted",
                  "index": i} for i in range(n)])
    lake = write_trials(tmp_path / "lake", trials, id_seed=5)
    r = run_gate(lake, GateConfig(), baseline="version=v1", candidate="version=v2")
    fp = r.scenarios[0].check("fingerprint")
    assert fp.verdict == "PASS" and r.decision != "block", (fp.verdict, fp.reason)
    assert fp.stats["n_pairs"] == n - len(cut) and fp.stats["pairing"] == "trial index"
    assert any(f"0 baseline, {len(cut)} candidate" in n for n in r.notes), r.notes
    # the same runs failing (not interrupted) are behaviour the test must see
    for t in trials[n:]:
        if t["error_class" if "error_class" in t else "outcome"] == "interrupted":
            t.update(error_class=None, outcome="fail")
    r = run_gate(write_trials(tmp_path / "lake2", trials, id_seed=5), GateConfig(),
                 baseline="version=v1", candidate="version=v2")
    assert r.scenarios[0].check("fingerprint").verdict == "FAIL" and r.decision == "block"


def test_an_undecided_regression_says_how_many_pairs_decide(tmp_path):
    # 40/40 against 38/40: the drop lies between about -0.07 and 0.11. The reason says what the
    # tests would need on average at the baseline's pass rate, simulated with the rule applied
    trials = ([{"scenario": "s", "version": "v1", "outcome": "pass"} for _ in range(40)]
              + [{"scenario": "s", "version": "v2", "outcome": "pass" if i < 38 else "fail"} for i in range(40)])
    lake = write_trials(tmp_path / "lake", trials)
    c = run_gate(lake, GateConfig(), baseline="version=v1", candidate="version=v2").scenarios[0].check("regression")
    assert c.verdict == "INCONCLUSIVE", (c.verdict, c.reason)
    assert c.stats["drop_lower"] < 0 < 0.1 <= c.stats["drop_upper"]
    assert "pairs decide for an unchanged agent on average" in c.reason and "40 so far" in c.reason, c.reason
    # both arms ran the same 40 indices: more candidate trials would have nothing to pair with
    assert "the baseline has no trial left to pair with, so both versions need more" in c.reason, c.reason
    # the baseline ran 400 indices, the candidate the first 40: further candidate trials pair
    # with the baseline's other 360, and the plan goes on from where the tests stand
    trials = ([{"scenario": "s", "version": "v1", "outcome": "pass" if i % 10 else "fail"} for i in range(400)]
              + [{"scenario": "s", "version": "v2", "outcome": "fail" if i < 8 else "pass", "index": i}
                 for i in range(40)])
    c = run_gate(write_trials(tmp_path / "lake1", trials), GateConfig(), baseline="version=v1",
                 candidate="version=v2").scenarios[0].check("regression")
    assert c.verdict == "INCONCLUSIVE" and c.stats["pairs"] == 40, (c.verdict, c.reason)
    assert "from where the tests stand, paired with the baseline's 360 unpaired trials: about" in c.reason, c.reason
    assert "more candidate trials decide for an unchanged agent on average" in c.reason, c.reason
    # 100/100 against 95/100 decides: the drop is below delta (upper bound under 0.1)
    trials = ([{"scenario": "s", "version": "v1", "outcome": "pass"} for _ in range(100)]
              + [{"scenario": "s", "version": "v2", "outcome": "pass" if i < 95 else "fail"} for i in range(100)])
    c = run_gate(write_trials(tmp_path / "lake2", trials), GateConfig(), baseline="version=v1",
                 candidate="version=v2").scenarios[0].check("regression")
    assert c.verdict == "PASS" and c.stats["drop_upper"] < 0.1, c.reason


def _cost_lake(path, candidate_cost, tools=lambda i: ["lookup"], seed=0):
    rng = np.random.default_rng(seed)
    trials = [{"scenario": "s", "version": "v1", "outcome": "pass", "tools": ["lookup"],
               "cost": float(rng.uniform(0.018, 0.022))} for _ in range(40)]
    trials += [{"scenario": "s", "version": "v2", "outcome": "pass", "tools": tools(i),
                "cost": float(rng.uniform(*candidate_cost))} for i in range(40)]
    return write_trials(path, trials, id_seed=7)


def test_a_shift_that_is_only_for_the_better_does_not_block(tmp_path):
    # half the cost, nothing else changed: the fingerprint shifted, for the better
    lake = _cost_lake(tmp_path / "cheaper", (0.008, 0.012))
    r = run_gate(lake, GateConfig(), baseline="version=v1", candidate="version=v2")
    fp = r.scenarios[0].check("fingerprint")
    assert fp.verdict == "PASS" and "only for the better" in fp.reason and r.decision != "block", fp.reason
    # the anytime test bets on worsening only, so its e-value does not grow (the check's
    # p-value no longer falls below alpha first, as the T² of all trials did); its
    # one-sided bets on an improvement say what moved
    assert [f["name"] for f in fp.stats["anytime_features"] if f["direction"] == "better"] == ["cost_usd",
                                                                                              "cost_per_step"]
    assert fp.stats["pvalue_adjusted"] >= 0.05
    assert {m["name"] for m in fp.stats["moved"]} >= {"cost_usd"}
    assert all(m["direction"] == "better" for m in fp.stats["moved"])
    cfg = GateConfig()
    cfg.block_any_shift = True
    assert run_gate(lake, cfg, baseline="version=v1", candidate="version=v2").decision == "block"
    # dearer: for the worse, blocks
    r = run_gate(_cost_lake(tmp_path / "dearer", (0.038, 0.042)), GateConfig(), baseline="version=v1",
                 candidate="version=v2")
    fp = r.scenarios[0].check("fingerprint")
    assert fp.verdict == "FAIL" and any(m["direction"] == "worse" for m in fp.stats["moved"]), fp.reason
    # cheaper, but it calls another tool half the time: a change of behaviour that is neither
    r = run_gate(_cost_lake(tmp_path / "other", (0.008, 0.012), tools=lambda i: ["lookup", "search"][: 1 + i % 2]),
                 GateConfig(), baseline="version=v1", candidate="version=v2")
    fp = r.scenarios[0].check("fingerprint")
    assert fp.verdict == "FAIL" and any(m["direction"] == "neutral" for m in fp.stats["moved"]), fp.reason
