"""Multi-fidelity runs (paper §7.4): a cheap proxy agent correlated with the target."""

from __future__ import annotations

import pytest

from otel_assay.errors import UsageError
from otel_assay.live.multifidelity import run_multi_fidelity
from otel_assay.live.scenarios import parse_scenarios

from .agents import Router

SUITE = parse_scenarios({"name": "routing", "config": {"threshold": 0.85, "delta": 0.15, "trials": 80},
                         "scenarios": [{"name": "billing", "input": "x", "properties": {"expected": "billing"}}]})


@pytest.mark.parametrize("p_target,p_proxy,want", [(0.92, 0.9, "PASS"), (0.5, 0.55, "FAIL")])
def test_multi_fidelity_run(tmp_path, p_target, p_proxy, want):
    # same seed: the two agents pass and fail on the same trial indices (correlated behaviour)
    r = run_multi_fidelity(SUITE, Router(p_target, seed=7), Router(p_proxy, seed=7), version="v",
                           lake=str(tmp_path), cost_ratio=0.05, calibration=30)
    assert r.rho > 0.5
    assert r.plan.n_target < 80 and r.plan.n_proxy > r.plan.n_target and r.plan.cost_ratio < 1
    s = r.scenarios[0]
    assert s.decision == want
    assert s.target[1] == r.plan.n_target and s.proxy[1] == r.plan.n_proxy


def test_uncorrelated_proxy_gets_no_trials(tmp_path):
    r = run_multi_fidelity(SUITE, Router(0.98, seed=1), Router(0.98, seed=2), version="v", lake=str(tmp_path),
                           cost_ratio=0.5, rho=0.0)
    assert r.plan.n_proxy == 0 and r.scenarios[0].target[1] == 80


def test_bad_cost_ratio(tmp_path):
    with pytest.raises(UsageError, match="cost_ratio"):
        run_multi_fidelity(SUITE, Router(0.9), Router(0.9), version="v", lake=str(tmp_path), cost_ratio=2)
