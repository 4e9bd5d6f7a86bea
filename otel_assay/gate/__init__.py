"""The gate: configuration and the deploy / block / manual decision.

>>> from otel_assay.gate import load_config, run_gate
>>> result = run_gate("traces", load_config("assay.yaml"), baseline="version=v1", candidate="version=v2")
>>> result.decision, result.exit_code
('block', 1)

Per scenario the gate runs, on the trials of a baseline and a candidate selection:

- ``pass_rate``   the candidate's pass rate against the threshold θ (Wilson interval, with
                  the exact binomial test confirming each decision on small samples); only
                  when a threshold is configured, so that an unchanged candidate can deploy
                  without one;
- ``regression``  did the pass rate drop: FAIL on a significant drop of at least δ, PASS on
                  non-inferiority; with paired trials (same trial indices in both arms) the
                  FAIL test is exact McNemar;
- ``fingerprint`` Hotelling T² on the behavioural fingerprints: FAIL when the mean
                  fingerprint moved, with the smallest shift it could have seen;
- ``stability``   the stability sub-scores: drift flags that the candidate raises and the
                  baseline did not; reported, and gating only when ``checks.stability`` is
                  on (they are "look here" heuristics).

and ``contracts`` / ``metamorphic`` when configured (each contract or relation must hold
in its threshold share of the candidate's trials).

One FAIL of any gating check in any scenario blocks, so the FAIL tests of all of them form
ONE multiple-testing family, corrected together (``correction``, Holm by default): every
scenario's pass_rate, regression and fingerprint test and each of its contracts and
relations. Holm then keeps the chance that an unchanged candidate is blocked at all at or
below alpha; corrected check by check, k gating checks would block it at up to k alpha.
Checks that are reported only or SKIPPED, stability (its new drift flags make it
INCONCLUSIVE, never FAIL: no test) and a fingerprint on too few trials to reject at all
are not in the family: they could block nothing and would only cost power. Each check's
``pvalue_adjusted`` is its p-value adjusted within the family. A PASS needs every scenario
to PASS, which needs no correction. The fingerprint's permutation count grows with the
family so that its p-value can reach the corrected level (see ``fingerprint.permutations``).
Coverage is computed on the candidate's trials. Decision: **deploy** when every gating
check PASSes and coverage meets its minimum, **block** when any FAILs, **manual** otherwise.

Trials without an outcome are judged only by the checks that do not need one (fingerprint,
stability, coverage); trials the error classes exclude (infrastructure, pre-validation,
empty runs) count in no check and are reported.

Modules: ``config`` (the YAML file), ``result`` (the model objects), ``lakes`` and ``arms``
(reading the trials), ``family`` (the correction), one module per check (``pass_rate``,
``regression``, ``fingerprint``, ``stability``, ``coverage``, ``oracles``), ``decision``,
and ``run`` (the flow).
"""

from .config import CHECKS, STARTER_CONFIG, GateConfig, ScenarioSettings, load_config, parse_config, with_overrides
from .result import FAIL, INCONCLUSIVE, PASS, SKIPPED, Arm, Check, GateResult, ScenarioResult
from .run import run_gate, run_verdict

__all__ = ["CHECKS", "FAIL", "INCONCLUSIVE", "PASS", "SKIPPED", "STARTER_CONFIG", "Arm", "Check", "GateConfig",
           "GateResult", "ScenarioResult", "ScenarioSettings", "load_config", "parse_config", "run_gate",
           "run_verdict", "with_overrides"]
