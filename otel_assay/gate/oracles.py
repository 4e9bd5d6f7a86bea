"""The contracts and metamorphic checks: behavioural rules judged on each arm's recorded trials.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import stats
from ..errors import DataError, UsageError
from ..oracles.contracts import TOOL_KINDS, ContractError, check_names, evaluate, known_tools, outcome_from_contracts
from ..oracles.metamorphic import RelationDataError, evaluate as evaluate_relations
from .config import GateConfig
from .family import Family
from .result import FAIL, INCONCLUSIVE, PASS, SKIPPED, Check, ScenarioResult

@dataclass
class Oracles:
    contracts: Any = None            # oracles.contracts.ContractResults
    pairs: list | None = None        # oracles.metamorphic pair dicts
    missing: str | None = None       # why the pairs are not there (an arm that need not have them)



def contract_tools(eng_c, eng_b, cfg: GateConfig) -> set[str] | None:
    """Tools either arm's lake has seen: what contract tool names are checked against."""
    if not any(c.kind in TOOL_KINDS for c in cfg.contracts or ()):
        return None  # no contract names a tool: nothing to check them against

    tools = known_tools(eng_c)
    if eng_b is not None and eng_b is not eng_c:
        tools |= known_tools(eng_b)
    return tools


def judge_oracles(eng, table: str, cfg: GateConfig, tools: set[str] | None = None, *, required: bool = True) -> Oracles:
    """Contracts and metamorphic relations judged on one arm's recorded trials.

    ``required=False`` (the baseline: its share is reported, it gates nothing): an arm
    without follow-up trials, such as a stored baseline recorded before the relation was
    configured, is noted in ``missing`` instead of stopping the gate."""
    eng.rows(f"CREATE OR REPLACE TEMP TABLE {table}_rows AS SELECT * FROM trials SEMI JOIN {table} USING (trace_id)")
    out = Oracles()
    try:
        if cfg.contracts:
            check_names(eng, cfg.contracts, scenarios=False, tools=tools)
            out.contracts = evaluate(eng, cfg.contracts, trials=f"{table}_rows")
        if cfg.metamorphic:
            out.pairs = evaluate_relations(eng, cfg.metamorphic, trials=f"{table}_rows")
    except ContractError as e:
        raise UsageError(f"{cfg.source}: {e}") from None
    except RelationDataError as e:
        if required:
            raise DataError(f"{table.replace('_', ' ')}: {e}") from None
        out.missing = f"{table.replace('_', ' ')}: {e}"
    return out


def outcomes_from_contracts(cols: dict[str, np.ndarray], oracle: Oracles, cfg: GateConfig) -> int:
    """Fill unknown outcomes of counted trials from the named contracts; return how many."""
    derived = outcome_from_contracts(oracle.contracts, cfg.outcome_from_contracts)
    passed = cols["passed"].astype(object)
    n = 0
    for i, (tid, counted) in enumerate(zip(cols["trace_id"], cols["counted"])):
        p = passed[i]
        if counted and (p is None or p != p) and derived.get(str(tid)) is not None:
            passed[i] = derived[str(tid)]
            n += 1
    cols["passed"] = passed
    return n


def _counts(holds_by_scenario: dict, scenario: str, name: str) -> tuple[int, int, int]:
    """(trials judged, trials where it holds, trials it could not judge) of one scenario."""
    values = holds_by_scenario.get(scenario, {}).get(name, [])
    judged = [v for v in values if v is not None]
    return len(judged), sum(judged), len(values) - len(judged)


def _group(scenarios: list, columns: dict[str, list]) -> dict[str, dict[str, list]]:
    out: dict[str, dict[str, list]] = {}
    for i, sc in enumerate(scenarios):
        per = out.setdefault(sc, {})
        for name, values in columns.items():
            per.setdefault(name, []).append(values[i])
    return out


def oracle_checks(results: list[ScenarioResult], oracle_b: Oracles | None, oracle_c: Oracles,
                   cfg: GateConfig, family: Family) -> None:
    """Per scenario, a ``contracts`` and a ``metamorphic`` check from the candidate's trials.

    Each contract (relation) must hold in at least its threshold share of the candidate's
    trials (pairs), by the pass rate's anytime-valid test over the trials in the order they
    ran (users gate again after adding trials; a one-look test read at every such look would
    block an unchanged agent more often each time). PASS: that test at level alpha / k for
    the k contracts (relations) of the scenario, alpha the smallest of theirs.
    FAIL: each contract's FAIL p-value is one test of the suite's family (Family), so the
    contracts of every scenario share the correction with the other checks; a contract with
    an alpha below the suite's has its p-value scaled up by suite alpha / its alpha, which
    holds it to its own level (a larger alpha cannot loosen the suite's). The check PASSes
    when every one PASSes and FAILs when any FAILs. The regression verdict against the
    baseline's share is reported alongside, not gating.
    """
    def tables(o: Oracles | None, kind: str):
        if o is None:
            return None
        if kind == "contracts" and o.contracts is not None:
            t = o.contracts.table
            return _group(t.column("scenario").to_pylist(),
                          {c.name: o.contracts.holds(c.name) for c in cfg.contracts})
        if kind == "metamorphic" and o.pairs is not None:
            # each relation over its own pairs: another relation's pairs are not its unjudged ones
            out: dict[str, dict[str, list]] = {}
            for rel in cfg.metamorphic:
                mine = [p for p in o.pairs if p["relation"] == rel.name]
                for sc, per in _group([p["scenario"] for p in mine], {rel.name: [p["holds"] for p in mine]}).items():
                    out.setdefault(sc, {}).update(per)
            return out
        return None

    for kind, items in (("contracts", cfg.contracts), ("metamorphic", cfg.metamorphic)):
        cand, base = tables(oracle_c, kind), tables(oracle_b, kind)
        if cand is None:
            continue
        for r in results:
            if not r.settings.checks.get(kind, True):
                r.checks.append(Check(kind, SKIPPED, "turned off for this scenario", gating=False))
                continue
            applicable = [it for it in items if getattr(it, "applies_to", lambda s: True)(r.scenario)]
            if r.candidate.trials == 0:
                # only the baseline ran it: open, as in pass_rate_checks (no check at all left a
                # candidate that dropped the scenario to deploy when these were the gating checks)
                if applicable:
                    r.checks.append(Check(kind, INCONCLUSIVE, "the candidate did not run this scenario"))
                continue
            judged = [it for it in applicable if _counts(cand, r.scenario, it.name)[0] > 0]
            # configured but judged in no trial (an unpriced model, text not recorded): say so,
            # rather than leave the user to think it held
            blind = [f"{it.name} ({_counts(cand, r.scenario, it.name)[2]} trials)" for it in applicable
                     if it not in judged and _counts(cand, r.scenario, it.name)[2]]
            blind_note = f"no trial could be judged by {', '.join(blind)}" if blind else ""
            if not judged:
                if blind:
                    r.checks.append(Check(kind, SKIPPED, blind_note, gating=False))
                continue
            level = min(it.alpha for it in judged) / len(judged)
            tested, detail = [], {}
            for it in judged:
                n, k, unknown = _counts(cand, r.scenario, it.name)
                # the anytime test over the judged trials in the order they ran, as the pass
                # rate's: a gate run again after more trials must not err more often for it
                held = [bool(h) for h in cand[r.scenario][it.name] if h is not None]
                v = stats.anytime_rate(held, it.threshold, r.settings.delta, level, r.settings.beta)
                p = min(1.0, v.pvalue_fail * max(1.0, cfg.alpha / it.alpha))
                entry = {"holds": k, "n": n, "unjudged": unknown, "rate": k / n, "ci_low": v.lower,
                         "ci_high": v.upper, "threshold": it.threshold, "verdict": v.verdict.value,
                         "e_pass": v.e_pass, "e_fail": v.e_fail, "pvalue": p, "pvalue_adjusted": None}
                if base is not None:
                    nb, kb, _u = _counts(base, r.scenario, it.name)
                    if nb:
                        reg = stats.regression_verdict(kb, nb, k, n, delta=r.settings.delta, alpha=level)
                        entry["baseline"] = {"holds": kb, "n": nb, "regression": reg.verdict.value,
                                             "pvalue": reg.pvalue}
                detail[it.name] = entry
                tested.append((it, v, p))
            check = Check(kind, INCONCLUSIVE, "", stats={"level": level, kind: detail})
            r.checks.append(check)

            def finish(adjusted, check=check, tested=tested, detail=detail, kind=kind, blind_note=blind_note):
                verdicts, reasons = [], []
                tag = family.adjusted_tag()
                for (it, v, p), p_adj in zip(tested, adjusted):
                    entry = detail[it.name]
                    entry["pvalue_adjusted"] = p_adj
                    k, n = entry["holds"], entry["n"]
                    if p_adj < cfg.alpha:
                        verdict = FAIL
                        reasons.append(f"{it.name} FAIL ({k}/{n} hold, below threshold {it.threshold}: "
                                       f"anytime {tag}p={p_adj:.3g} < alpha={cfg.alpha}, reached at {v.fail_at} "
                                       "trials)")
                    elif v.pass_at is not None:
                        verdict = PASS
                    else:
                        verdict = INCONCLUSIVE
                        if v.fail_at is not None:
                            why = (f"upper bound {v.upper:.3f} < threshold {it.threshold} but not after "
                                   f"{family.describe()} (adjusted p={p_adj:.3g})")
                        else:
                            why = (f"the share lies between {v.lower:.3f} and {v.upper:.3f}, which holds the "
                                   f"threshold {it.threshold}; more trials would decide")
                        reasons.append(f"{it.name} INCONCLUSIVE ({k}/{n} hold, {why})")
                    entry["verdict"] = verdict
                    verdicts.append(verdict)
                check.verdict = stats.suite_verdict(verdicts).verdict.value
                what = "contracts" if kind == "contracts" else "relations"
                check.reason = "; ".join(reasons) if reasons else f"all {len(tested)} {what} hold often enough"
                if blind_note:
                    check.reason += f"; {blind_note}"

            family.add(check, [p for _it, _v, p in tested], finish)
