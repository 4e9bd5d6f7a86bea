"""otel_assay.stats: the statistics behind otel-assay's verdicts. Pure numpy/scipy functions
on numbers and arrays — no I/O, no printing, nothing else from otel_assay — each returning a
small frozen result object in the style of scipy.stats. Verdicts are :class:`Verdict` values
("PASS" / "FAIL" / "INCONCLUSIVE"); p-values come with ``neg_log10_pvalue`` computed in log
space so they never underflow; anything random takes a ``seed``.

Definitions follow the AgentAssay paper (its stochastic test semantics, coverage metrics and
token-efficient testing) with deliberate changes where the paper's rule misbehaves; each
module says what it changed and why.

Pass rates (proportions)
    wilson_interval, clopper_pearson_interval, verdict (three-valued: PASS / FAIL /
    INCONCLUSIVE from a confidence interval), sample_size_threshold
Regression between two versions (regression)
    regression_verdict, regression_verdicts (Fisher FAIL + non-inferiority PASS, suite-corrected),
    fisher_exact_test, two_proportion_ztest, newcombe_interval, effect_sizes (difference,
    Cohen's h, odds ratio), regression_power, sample_size_regression, mcnemar_exact (paired trials)
Anytime-valid decisions (anytime): valid however often one looks, used by the gate
    anytime_regression (paired outcomes: drop FAIL / non-inferiority PASS), anytime_rate
    (against a threshold), plan_anytime_regression, plan_anytime_rate (simulated trials to a
    decision)
Between-run variation (between_runs)
    between_run_variance (method-of-moments tau^2 of a pass rate across runs), run_margin
Sequential testing (sprt)
    SPRT (.update, .resume, .with_beta_prior), sprt_test, sprt_expected_n (Wald's approximation),
    sprt_operating_characteristics (exact), beta_prior_llr (warm-start prior)
Bayesian (bayes)
    bayes_regression (posterior probability of a drop)
Multiple testing (multiple)
    adjust_pvalues (holm, bonferroni, bh, by), suite_verdict (FAIL if any scenario FAILs)
Fingerprints (hotelling)
    hotelling_t2 (two-sample T² on fingerprints), hotelling_detectable_shift
Coverage (coverage)
    agent_coverage, tool_coverage, path_coverage, state_coverage, boundary_coverage,
    model_coverage, overall_coverage, chao1, good_turing_coverage
Budgets (budget)
    adaptive_budget (calibrated from a few trials), adaptive_sample_size, fingerprint_variance,
    variance_class (stable / moderate / volatile), fingerprint_sample_size, stouffer_combine,
    multi_fidelity_combine, multi_fidelity_allocation (cheap proxy model + target model)
Drift (drift)
    CUSUM, BernoulliCUSUM, PageHinkley, cusum, bernoulli_cusum, page_hinkley
"""

import importlib

# public name -> submodule; submodules load on first use, so importing one piece (the CLI,
# a coverage constant) does not pay for scipy
_EXPORTS = {
    "AdjustedPValues": "multiple",
    "AnytimePlan": "anytime",
    "AnytimeResult": "anytime",
    "BayesResult": "bayes",
    "BernoulliCUSUM": "drift",
    "BetweenRuns": "between_runs",
    "BudgetResult": "budget",
    "CUSUM": "drift",
    "CombinedPValue": "budget",
    "CoverageDimension": "coverage",
    "CoverageReport": "coverage",
    "DEFAULT_STATE_LAMBDA": "coverage",
    "DifferenceCI": "regression",
    "DriftResult": "drift",
    "EffectSizes": "regression",
    "FeatureShift": "hotelling",
    "FisherResult": "regression",
    "HotellingResult": "hotelling",
    "McNemarResult": "regression",
    "MultiFidelityPlan": "budget",
    "PageHinkley": "drift",
    "ProportionCI": "proportions",
    "RegressionResult": "regression",
    "SPRT": "sprt",
    "SPRTCharacteristics": "sprt",
    "SPRTDesign": "sprt",
    "SPRTState": "sprt",
    "SuiteVerdict": "multiple",
    "Verdict": "_common",
    "VerdictResult": "proportions",
    "ZTestResult": "regression",
    "adaptive_budget": "budget",
    "adaptive_sample_size": "budget",
    "adjust_pvalues": "multiple",
    "agent_coverage": "coverage",
    "anytime_rate": "anytime",
    "anytime_regression": "anytime",
    "between_run_variance": "between_runs",
    "bayes_regression": "bayes",
    "bernoulli_cusum": "drift",
    "beta_prior_llr": "sprt",
    "boundary_coverage": "coverage",
    "chao1": "coverage",
    "clopper_pearson_interval": "proportions",
    "cusum": "drift",
    "effect_sizes": "regression",
    "fingerprint_sample_size": "budget",
    "fingerprint_variance": "budget",
    "fisher_exact_test": "regression",
    "good_turing_coverage": "coverage",
    "hotelling_detectable_shift": "hotelling",
    "hotelling_t2": "hotelling",
    "mcnemar_exact": "regression",
    "model_coverage": "coverage",
    "multi_fidelity_allocation": "budget",
    "multi_fidelity_combine": "budget",
    "newcombe_interval": "regression",
    "overall_coverage": "coverage",
    "page_hinkley": "drift",
    "path_coverage": "coverage",
    "plan_anytime_rate": "anytime",
    "plan_anytime_regression": "anytime",
    "regression_power": "regression",
    "run_margin": "between_runs",
    "regression_verdict": "regression",
    "regression_verdicts": "regression",
    "sample_size_regression": "regression",
    "sample_size_threshold": "proportions",
    "sprt_design": "sprt",
    "sprt_expected_n": "sprt",
    "sprt_operating_characteristics": "sprt",
    "sprt_test": "sprt",
    "state_coverage": "coverage",
    "stouffer_combine": "budget",
    "suite_verdict": "multiple",
    "tool_coverage": "coverage",
    "two_proportion_ztest": "regression",
    "variance_class": "budget",
    "verdict": "proportions",
    "wilson_interval": "proportions",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))

__all__ = [
    "AdjustedPValues",
    "AnytimePlan",
    "AnytimeResult",
    "BayesResult",
    "BernoulliCUSUM",
    "BetweenRuns",
    "BudgetResult",
    "CUSUM",
    "CombinedPValue",
    "CoverageDimension",
    "CoverageReport",
    "DEFAULT_STATE_LAMBDA",
    "DifferenceCI",
    "DriftResult",
    "EffectSizes",
    "FeatureShift",
    "FisherResult",
    "HotellingResult",
    "McNemarResult",
    "MultiFidelityPlan",
    "PageHinkley",
    "ProportionCI",
    "RegressionResult",
    "SPRT",
    "SPRTCharacteristics",
    "SPRTDesign",
    "SPRTState",
    "SuiteVerdict",
    "Verdict",
    "VerdictResult",
    "ZTestResult",
    "adaptive_budget",
    "adaptive_sample_size",
    "adjust_pvalues",
    "agent_coverage",
    "anytime_rate",
    "anytime_regression",
    "bayes_regression",
    "between_run_variance",
    "bernoulli_cusum",
    "beta_prior_llr",
    "boundary_coverage",
    "chao1",
    "clopper_pearson_interval",
    "cusum",
    "effect_sizes",
    "fingerprint_sample_size",
    "fingerprint_variance",
    "fisher_exact_test",
    "good_turing_coverage",
    "hotelling_detectable_shift",
    "hotelling_t2",
    "mcnemar_exact",
    "model_coverage",
    "multi_fidelity_allocation",
    "multi_fidelity_combine",
    "newcombe_interval",
    "overall_coverage",
    "page_hinkley",
    "path_coverage",
    "plan_anytime_rate",
    "plan_anytime_regression",
    "regression_power",
    "regression_verdict",
    "regression_verdicts",
    "run_margin",
    "sample_size_regression",
    "sample_size_threshold",
    "sprt_design",
    "sprt_expected_n",
    "sprt_operating_characteristics",
    "sprt_test",
    "state_coverage",
    "stouffer_combine",
    "suite_verdict",
    "tool_coverage",
    "two_proportion_ztest",
    "variance_class",
    "verdict",
    "wilson_interval",
]
