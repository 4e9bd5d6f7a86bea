"""The fingerprint check: did the behavioural fingerprints of each scenario's trials shift.

Users gate, add trials and gate again, so the check must not err more often for being read
at many trial counts. Hotelling's T² read at every look does (at 10 looks it blocked an
unchanged agent about a fifth of the time), so FAIL is the union of two tests at half the
level each: the anytime-valid shift test of ``stats.fingerprint_anytime`` over the trials
paired in order, valid at every count of pairs, and T² on the first FIRST_LOOK_PAIRS pairs
only, one look fixed by the data however often anyone gates. The check's p-value is
min(1, 2 min(p_anytime, p_T²)), valid by the union bound. A shift only for the better does
not block: the anytime test bets only on worsening (and on neutral moves), and the T² look
keeps its rule of passing a shift whose every moved feature moved for the better. PASS
reports the smallest shift the T² look detects, so "no shift" is read with its power.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .. import stats
from ..analyze.fingerprint import fingerprint_matrix, tool_vocabulary
from ..stats.fingerprint_anytime import MAX_FRACTION, anytime_shift
from .config import GateConfig
from .family import Family
from .lakes import engines
from .regression import _by_index
from .result import FAIL, INCONCLUSIVE, PASS, Check

# Bookkeeping columns of the fingerprint matrix that are not features.
_ID_COLUMNS = ("trace_id", "scenario", "version", "run_id")
# Columns that describe how the instrumentation nested its spans rather than what the agent
# did: one LangGraph run has 4 steps under otel-assay and LangSmith, 6 under OpenInference (an
# agent step per node visit), so depth, leaf count and the shares of container steps tell the
# instrumentations apart. A baseline recorded by one would block a candidate recorded by
# another, unchanged; the shift test leaves them out (`otel-assay fingerprint` shows them).
STRUCTURAL_FEATURES = ("max_depth", "n_branches", "frac_agent", "frac_reason", "frac_workflow", "frac_other")
# Features whose change means better or worse: -1 where less is better, +1 where more is.
# The rest (which tools, the shares of step kinds, the answer's length) only say the agent
# behaves differently, which is neither.
DIRECTION = {"n_steps": -1, "error_flag": -1, "recovery_rate": +1, "total_tokens": -1, "tokens_per_step": -1,
             "cost_usd": -1, "cost_per_step": -1, "latency_s": -1}
# Hotelling's T² is read once, on the first this many pairs. Its power at 50 trials per arm
# is what the project's fingerprint power figures are quoted at (the tool-mix shift A .5→.35:
# .88 where the anytime test alone has .52), and a look fixed by the data (the first 50
# pairs, the same p-value however often anyone gates) adds no looks when users re-gate.
FIRST_LOOK_PAIRS = 50
# The most permutations the gate draws for one fingerprint test (about 1-2 s per scenario at
# 100 trials on a CI core). See permutations().
MAX_PERMUTATIONS = 199_999
# The permutation p-value's floor 1 / (B + 1) is held at a tenth of the family's per-test level
# when the cap allows: a shift whose true p-value is a fifth of that level then FAILs with
# probability > 0.99 (at most 8 of B relabellings may beat it), where a floor just under the
# level would lose it whenever one relabelling does (probability 1 - e^-5).
_PERMUTATION_RESOLUTION = 10


def fingerprint_tables(eng_b, eng_c, table_b: str, table_c: str):
    # both arms (and the vocabulary) read these: compute them once per lake, not per query
    for eng in engines(eng_b, eng_c):
        eng.materialize(["fingerprint_tools", "fingerprints"])
    vocab = sorted(set(tool_vocabulary(eng_b, table_b)) | set(tool_vocabulary(eng_c, table_c)))
    return fingerprint_matrix(eng_b, table_b, vocab), fingerprint_matrix(eng_c, table_c, vocab)


def _matrix(table, features: list[str], rows: np.ndarray) -> np.ndarray:
    return np.column_stack([table.column(f).to_numpy(zero_copy_only=False)[rows].astype(float)
                            for f in features]) if features else np.zeros((len(rows), 0))


def fingerprint_checks(results, fp_b, fp_c, complete_b: set, complete_c: set, cfg: GateConfig, plots: dict,
                        progress: Callable[[str], None], family: Family) -> list[str]:
    notes = []
    all_names = [n for n in fp_c.column_names if n not in _ID_COLUMNS]
    names = [n for n in all_names if n not in STRUCTURAL_FEATURES]
    excluded = [n for n in cfg.exclude_features if n in names]
    names = [n for n in names if n not in cfg.exclude_features]
    # columns with a missing value (e.g. cost of an unpriced model) cannot enter the test
    missing = [n for n in names if fp_b.column(n).null_count or fp_c.column(n).null_count]
    # nor can NaN or infinity (span data such as an llm.cost.total of "nan"): T² has no
    # meaning for them, and one such span must not stop the gate
    nonfinite = [n for n in names if n not in missing and not all(
        np.isfinite(fp.column(n).to_numpy(zero_copy_only=False).astype(float)).all() for fp in (fp_b, fp_c))]
    features = [n for n in names if n not in missing and n not in nonfinite]
    if missing:
        why = []
        if any(n.startswith("cost") for n in missing):
            why.append("cost needs a priced model: set OTEL_ASSAY_PRICES to a price table CSV; the gate "
                       "commands have no --prices option")
        if any(n.endswith("_tokens") or n == "tokens_per_step" for n in missing):
            why.append("token counts need LLM calls that report gen_ai.usage.input_tokens or output_tokens")
        notes.append(f"fingerprint features left out for missing values: {', '.join(missing)}"
                     + (f" ({'; '.join(why)})" if why else ""))
    if nonfinite:
        notes.append(f"fingerprint features left out for values that are not finite numbers (NaN or infinity "
                     f"in the spans): {', '.join(nonfinite)}")
    # a misspelt exclusion would leave the feature in the test, silently (tool:<name> columns
    # exist only for the tools these trials called, so those are not checked)
    unknown = [n for n in cfg.exclude_features if n not in all_names and not n.startswith("tool:")]
    if unknown:
        notes.append(f"fingerprint.exclude names no fingerprint feature: {', '.join(unknown)} (features: "
                     f"{', '.join(n for n in all_names if n not in STRUCTURAL_FEATURES and not n.startswith('tool:'))}, "
                     "tool:<name>)")

    rb, rc = _rows_by_scenario(fp_b, complete_b), _rows_by_scenario(fp_c, complete_c)
    todo = []
    for r in results:
        if not r.settings.checks["fingerprint"]:
            continue
        if r.scenario not in rb or r.scenario not in rc:
            side = "baseline" if r.scenario not in rb else "candidate"
            r.checks.append(Check("fingerprint", INCONCLUSIVE, f"no {side} trials for this scenario: no comparison"))
            continue
        if not features:
            r.checks.append(Check("fingerprint", INCONCLUSIVE, "no fingerprint feature is left to compare: "
                                  "fingerprint.exclude (and any feature a note says was left out) removes all "
                                  "of them; exclude fewer, or turn the check off with checks: {fingerprint: false}"))
            continue
        todo.append(r)
    # the family's per-test level once these tests join it: the permutation p-value must be
    # able to get below it, or no fingerprint could FAIL (1 / (B + 1) >= alpha / m: from 500
    # scenarios at the default 9999 permutations); the T² look is held to half of it
    level = family.level(family.size + len(todo))
    n_perm = permutations(cfg.permutations, level / 2)
    directions = [DIRECTION.get(f, 0) for f in features]
    found = []
    for i, r in enumerate(todo):
        progress(f"fingerprint {r.scenario} ({i + 1}/{len(todo)})")
        at_b, at_c, pairing = pair_rows(rb[r.scenario], rc[r.scenario], complete_b, complete_c, fp_b, fp_c,
                                        cfg.pairing)
        xb, xc = _matrix(fp_b, features, at_b), _matrix(fp_c, features, at_c)
        a = anytime_shift(xb, xc, alpha=cfg.alpha / 2, directions=directions,
                          block_improvements=cfg.block_any_shift, feature_names=features)
        hb, hc = xb[:FIRST_LOOK_PAIRS], xc[:FIRST_LOOK_PAIRS]
        # before the look, T² only describes the pairs so far (top features, d_eff): its
        # p-value decides nothing, so a few permutations do
        look_perm = n_perm if len(hb) >= FIRST_LOOK_PAIRS else 99
        h = stats.hotelling_t2(hb, hc, alpha=cfg.alpha / 2, beta=r.settings.beta, n_permutations=look_perm,
                               seed=cfg.seed, feature_names=features, top_k=5)
        found.append((a, h, _moves(hb, hc, features, cfg.alpha), pairing))
        plots.setdefault("pca", {})[r.scenario] = _pca_points(xb, xc)
    if any(h.method == "permutation" for _, h, _, _ in found) and 2.0 / (n_perm + 1) >= level:
        notes.append(f"fingerprint: {n_perm} permutations (the most the gate draws: {MAX_PERMUTATIONS}, or "
                     f"fingerprint.permutations) give T² p-values no smaller than 1/{n_perm + 1}, not below "
                     f"{level / 2:.3g}, half the level {cfg.correction} holds the smallest of the suite's "
                     f"{family.size + len(todo)} FAIL tests to: the T² look of a fingerprint tested by "
                     "permutation cannot FAIL; raise fingerprint.permutations, or gate fewer scenarios "
                     "or checks at once")
    for r, (a, h, moves, pairing) in zip(todo, found):
        n = a.n_pairs
        counts = n >= FIRST_LOOK_PAIRS and h.verdict is not stats.Verdict.INCONCLUSIVE
        better = _only_improvements(moves) if counts else ""
        # the T² look's direction rule: a shift only for the better is no FAIL (a FAIL's
        # subset, so the p-value stays valid); the anytime test carries its rule in its bets
        p_t2 = h.pvalue if counts and (cfg.block_any_shift or not better) else 1.0
        pvalue = min(1.0, 2.0 * min(a.pvalue, p_t2))
        crit = _t2_critical(h, cfg.alpha / 2)
        st = {"pvalue": pvalue, "pvalue_adjusted": None, "pairing": pairing, "n_pairs": n,
              "e_value": a.e_value, "pvalue_anytime": a.pvalue, "fail_at": a.fail_at,
              "anytime_features": [{"name": f.name, "baseline_mean": f.baseline_mean,
                                    "candidate_mean": f.candidate_mean, "mean_rank_shift": f.mean_rank_shift,
                                    "e_up": f.e_up, "e_down": f.e_down, "direction": f.direction}
                                   for f in a.features if f.direction != "none"],
              "t2_pairs": min(n, FIRST_LOOK_PAIRS), "t2_counts": counts, "pvalue_t2": h.pvalue,
              "t2": None if math.isinf(h.statistic) else h.statistic, "f": h.f_statistic,
              "df": list(h.df) if h.df else None,
              # an F p-value can underflow to 0; its log does not
              "neg_log10_pvalue": -math.log10(pvalue) if pvalue > 0 else h.neg_log10_pvalue - math.log10(2.0),
              "method": h.method, "n_permutations": h.n_permutations, "d_eff": h.d_eff,
              "n_features": h.n_features, "shrinkage": h.shrinkage, "n_baseline": h.n_baseline,
              "n_candidate": h.n_candidate, "min_detectable_shift": h.min_detectable_shift, "t2_critical": crit,
              # a pooled SD of rounding noise (a feature constant within each arm) gives an
              # astronomically large smd: it means "separated", which null (±inf) says
              "top_features": [{"name": f.name, "smd": None if not abs(f.smd) < 1e6 else f.smd,
                                "baseline_mean": f.baseline_mean, "candidate_mean": f.candidate_mean,
                                "baseline_sd": f.baseline_sd, "candidate_sd": f.candidate_sd}
                               for f in h.top_features],
              "excluded_features": excluded + missing, "moved": moves}
        if n < FIRST_LOOK_PAIRS and 2.0 * (1.0 + MAX_FRACTION) ** -n >= cfg.alpha:
            # too few pairs for any p-value below alpha: no test, so not in the family
            need = math.ceil(math.log(2.0 / cfg.alpha) / math.log1p(MAX_FRACTION))
            r.checks.append(Check("fingerprint", INCONCLUSIVE,
                                  f"too few paired trials ({n}): no shift can be shown before {need} pairs", stats=st))
            continue
        check = Check("fingerprint", INCONCLUSIVE, "", stats=st)
        r.checks.append(check)

        def finish(adjusted, check=check, a=a, h=h, scenario=r.scenario, beta=r.settings.beta, counts=counts,
                   better=better):
            p_adj = adjusted[0]
            st = check.stats
            st["pvalue_adjusted"] = p_adj
            # the power figures of the T² look at half the level the family holds its strictest
            # test to, not at alpha: a shift detectable only at alpha is not one this gate
            # would block on. A T² past this critical value FAILs under any of the corrections
            level = family.level() / 2
            shift = (stats.hotelling_detectable_shift(FIRST_LOOK_PAIRS, FIRST_LOOK_PAIRS, h.d_eff, level, beta)
                     if h.min_detectable_shift is not None else None)
            st["min_detectable_shift"] = shift
            st["t2_critical"] = _t2_critical(h, level)
            st["power_level"] = level
            tag = family.adjusted_tag()
            if p_adj < cfg.alpha:
                check.verdict, check.reason = FAIL, f"behaviour shifted: {tag}p={p_adj:.3g} < alpha={cfg.alpha}; " \
                    + _fail_detail(a, h, counts, st["moved"])
            elif better and 2.0 * h.pvalue < cfg.alpha and not cfg.block_any_shift:
                check.verdict, check.reason = PASS, (
                    f"behaviour shifted in the first {FIRST_LOOK_PAIRS} pairs (T² p={h.pvalue:.3g}), only for "
                    f"the better: {better}; not blocking (fingerprint.block_any_shift: true blocks it)")
            else:
                mds = f"; smallest shift the {FIRST_LOOK_PAIRS}-pair T² look detects {shift:.2f} SD" if shift else ""
                look = ("" if counts else f"; T² joins at {FIRST_LOOK_PAIRS} pairs")
                check.verdict, check.reason = PASS, (
                    f"no shift detected: {tag}p={p_adj:.3g} over {a.n_pairs} pairs (e={a.e_value:.3g}){look}{mds}")
            gained = [f"{f['name']} {f['baseline_mean']:.3g}→{f['candidate_mean']:.3g}"
                      for f in st["anytime_features"] if f["direction"] == "better"]
            if gained and check.verdict == PASS and not better and not cfg.block_any_shift:
                only = "only " if all(f["direction"] == "better" for f in st["anytime_features"]) else ""
                check.reason += (f"; behaviour shifted {only}for the better: {', '.join(gained)}; not blocking "
                                 "(fingerprint.block_any_shift: true blocks it)")
            plots.setdefault("t2", {})[scenario] = {"t2": st["t2"], "critical": st["t2_critical"],
                                                    "verdict": check.verdict}

        family.add(check, [pvalue], finish)
    return notes


def _rows_by_scenario(fp, trials) -> dict[str, np.ndarray]:
    """Rows of the fingerprint matrix of each scenario's complete trials (in the matrix's order)."""
    tid = fp.column("trace_id").to_numpy(zero_copy_only=False)
    sc = fp.column("scenario").to_numpy(zero_copy_only=False)
    keep = np.fromiter((t in trials for t in tid), bool, len(tid))
    out: dict[str, np.ndarray] = {}
    order = np.flatnonzero(keep)
    for s in np.unique(sc[order].astype(str)) if len(order) else []:
        out[s] = order[sc[order] == s]
    return out


def pair_rows(rows_b, rows_c, trials_b: dict, trials_c: dict, fp_b, fp_c,
              pairing: str) -> tuple[np.ndarray, np.ndarray, str]:
    """(baseline rows, candidate rows, how they pair): row i of each is pair i. By trial index
    when both arms ran the same indices (with ``pairing: auto``), else in run order, the longer
    arm's extra trials unused. Never by trace id: ids are random, so a trial added later would
    land between earlier ones and change the earlier pairs, which the anytime test's guarantee
    at every count of pairs rests on."""
    def ordered(rows, fp, trials):
        tid = fp.column("trace_id").to_numpy(zero_copy_only=False)[rows]
        idx = np.array([trials[str(t)][0] for t in tid], dtype=object)
        pos = np.array([trials[str(t)][1] for t in tid], dtype=np.int64)
        order = np.argsort(pos, kind="stable")
        return rows[order], idx[order]

    rows_b, ib = ordered(rows_b, fp_b, trials_b)
    rows_c, ic = ordered(rows_c, fp_c, trials_c)
    if pairing == "auto":
        by_index = _by_index(ib, ic)
        if by_index is not None:
            return rows_b[by_index[0]], rows_c[by_index[1]], "trial index"
    n = min(len(rows_b), len(rows_c))
    return rows_b[:n], rows_c[:n], "run order"


def _fail_detail(a, h, counts: bool, moves: list[dict]) -> str:
    """Which of the two tests found the shift, and which features moved which way."""
    parts = []
    if a.fail_at is not None:
        moved = [f"{f.name} {_way(f.direction)}" for f in a.features if f.direction != "none"]
        parts.append(f"the anytime test reached e={a.e_value:.3g} after {a.fail_at} of {a.n_pairs} pairs"
                     + (f" (moved: {', '.join(moved)})" if moved else ""))
    if counts and (a.fail_at is None or h.pvalue < a.pvalue):
        moved = [f"{m['name']} {_way(m['direction'])}" for m in moves]
        if not moved:
            moved = [f.name for f in h.top_features[:3] if f.smd != 0]
        # the anytime test's moves, when it FAILed too, already say what moved
        parts.append(f"T² on the first {FIRST_LOOK_PAIRS} pairs p={h.pvalue:.3g} (d_eff={h.d_eff})"
                     + (f"; moved most: {', '.join(moved)}" if moved and a.fail_at is None else ""))
    return "; ".join(parts) or f"anytime e={a.e_value:.3g} over {a.n_pairs} pairs"


def _way(direction: str) -> str:
    return {"worse": "(worse)", "better": "(better)"}.get(direction, "(neutral)")


def _moves(xb: np.ndarray, xc: np.ndarray, features: list[str], alpha: float) -> list[dict]:
    """The features whose mean moved at level alpha by Welch's t-test (two-sided, uncorrected:
    generous on purpose, since a move here can only keep a shift blocking), each with which
    way: "better" / "worse" for a feature in DIRECTION, else "neutral"."""
    # imported here: scipy.special costs 0.9 s, which a gate without fingerprints need not pay
    from scipy.special import stdtr

    out = []
    nb, nc = len(xb), len(xc)
    if nb < 2 or nc < 2:
        return out
    mb, mc = xb.mean(axis=0), xc.mean(axis=0)
    vb, vc = xb.var(axis=0, ddof=1) / nb, xc.var(axis=0, ddof=1) / nc
    for j, name in enumerate(features):
        diff, se2 = mc[j] - mb[j], vb[j] + vc[j]
        if diff == 0.0:
            continue
        if se2 <= 0.0:
            p = 0.0  # constant within each arm, different between them
        else:
            dof = se2 ** 2 / ((vb[j] ** 2 / (nb - 1) if vb[j] else 0.0) + (vc[j] ** 2 / (nc - 1) if vc[j] else 0.0))
            p = float(2.0 * stdtr(dof, -abs(diff) / math.sqrt(se2)))
        if p < alpha:
            sign = DIRECTION.get(name)
            way = "neutral" if sign is None else "better" if sign * diff > 0 else "worse"
            out.append({"name": name, "baseline_mean": float(mb[j]), "candidate_mean": float(mc[j]), "pvalue": p,
                        "direction": way})
    return out


def _only_improvements(moves: list[dict]) -> str:
    """The moves in words when every feature that moved did so for the better, else ""."""
    if not moves or any(m["direction"] != "better" for m in moves):
        return ""
    return ", ".join(f"{m['name']} {m['baseline_mean']:.3g}→{m['candidate_mean']:.3g}" for m in moves)


def permutations(configured: int, level: float) -> int:
    """Random relabellings for a permutation p-value that has to reach ``level``: at least the
    configured number, raised until the floor 1 / (B + 1) is a tenth of the level, at most
    MAX_PERMUTATIONS (or the configured number, if larger).

    Why not the F approximation instead: below 100 trials per scenario, and whenever the
    covariance is shrunk, the F reference does not hold its level; the exact permutation
    p-value does."""
    wanted = math.ceil(_PERMUTATION_RESOLUTION / level) - 1
    return max(configured, min(wanted, MAX_PERMUTATIONS))


def _t2_critical(h, alpha: float) -> float | None:
    """The T² a shift must reach to be significant at alpha (from the F reference)."""
    if not h.df:
        return None
    # imported here: scipy.special costs 0.9 s, and commands that only import the gate package
    # (`gate init`, loading a config for `live run`) must not pay it
    from scipy.special import fdtri

    d1, d2 = h.df
    n = h.n_baseline + h.n_candidate
    return float(fdtri(d1, d2, 1.0 - alpha) * (n - 2) * d1 / d2)


def _pca_points(xb: np.ndarray, xc: np.ndarray, limit: int = 300) -> dict[str, Any]:
    """The first two principal components of both arms, up to ``limit`` trials each, for plotting."""
    x = np.vstack([xb, xc])
    if x.shape[0] < 3 or x.shape[1] == 0:
        return {"baseline": [], "candidate": [], "explained": [0.0, 0.0]}
    sd = x.std(axis=0)
    keep = sd > 1e-12
    if not keep.any():
        return {"baseline": [], "candidate": [], "explained": [0.0, 0.0]}
    z = (x[:, keep] - x[:, keep].mean(axis=0)) / sd[keep]
    rng = np.random.default_rng(0)
    fit = z if len(z) <= 5000 else z[rng.choice(len(z), 5000, replace=False)]
    _, s, vt = np.linalg.svd(fit, full_matrices=False)
    comps = vt[:2].T
    if comps.shape[1] == 1:
        comps = np.column_stack([comps, np.zeros(len(comps))])
    pts = z @ comps
    share = (s ** 2) / max((s ** 2).sum(), 1e-300)

    def sample(p):
        if len(p) > limit:
            p = p[np.sort(rng.choice(len(p), limit, replace=False))]
        return [[round(float(a), 4), round(float(b), 4)] for a, b in p]

    return {"baseline": sample(pts[: len(xb)]), "candidate": sample(pts[len(xb):]),
            "explained": [float(share[0]), float(share[1]) if len(share) > 1 else 0.0]}
