"""otel_assay.stats: the statistics behind otel-assay's verdicts. Pure numpy/scipy functions
on numbers and arrays — no I/O, no printing, nothing else from otel_assay — each returning a
small frozen result object in the style of scipy.stats. Verdicts are :class:`Verdict` values
("PASS" / "FAIL" / "INCONCLUSIVE"); p-values come with ``neg_log10_pvalue`` computed in log
space so they never underflow; anything random takes a ``seed``.

Definitions follow the AgentAssay paper (§3, §4, §7) as amended by DESIGN §6-§8.

Pass rates (proportions)
    wilson_interval, clopper_pearson_interval, verdict (Def. 3.6), sample_size_threshold (Eq. 1)
Regression between two versions (regression)
    regression_verdict, regression_verdicts (Def. 3.7 + non-inferiority PASS, suite-corrected),
    fisher_exact_test, two_proportion_ztest, newcombe_interval, effect_sizes (Def. 3.8),
    regression_power, sample_size_regression (Eq. 6), mcnemar_exact (paired trials)
Sequential testing (sprt)
    SPRT (.update, .resume, .with_beta_prior), sprt_test, sprt_expected_n (Eq. 9-10),
    sprt_operating_characteristics (exact), beta_prior_llr (Eq. 49)
Bayesian (bayes)
    bayes_regression (Def. 3.10)
Multiple testing (multiple)
    adjust_pvalues (holm, bonferroni, bh, by), suite_verdict (Def. 3.11)
Fingerprints (hotelling)
    hotelling_t2 (Thm 7.1), hotelling_detectable_shift
Coverage (coverage)
    agent_coverage, tool_coverage, path_coverage, state_coverage, boundary_coverage,
    model_coverage, overall_coverage, chao1, good_turing_coverage
Budgets (budget)
    adaptive_budget (Alg. 4), adaptive_sample_size (Eq. 39), fingerprint_variance,
    variance_class (Def. 7.4), fingerprint_sample_size (Eq. 30), stouffer_combine,
    multi_fidelity_combine, multi_fidelity_allocation (Prop. 7.4)
Drift (drift)
    CUSUM, BernoulliCUSUM, PageHinkley, cusum, bernoulli_cusum, page_hinkley
"""

from ._common import Verdict
from .bayes import BayesResult, bayes_regression
from .budget import (
    BudgetResult,
    CombinedPValue,
    MultiFidelityPlan,
    adaptive_budget,
    adaptive_sample_size,
    fingerprint_sample_size,
    fingerprint_variance,
    multi_fidelity_allocation,
    multi_fidelity_combine,
    stouffer_combine,
    variance_class,
)
from .coverage import (
    DEFAULT_STATE_LAMBDA,
    CoverageDimension,
    CoverageReport,
    agent_coverage,
    boundary_coverage,
    chao1,
    good_turing_coverage,
    model_coverage,
    overall_coverage,
    path_coverage,
    state_coverage,
    tool_coverage,
)
from .drift import CUSUM, BernoulliCUSUM, DriftResult, PageHinkley, bernoulli_cusum, cusum, page_hinkley
from .hotelling import FeatureShift, HotellingResult, hotelling_detectable_shift, hotelling_t2
from .multiple import AdjustedPValues, SuiteVerdict, adjust_pvalues, suite_verdict
from .proportions import (
    ProportionCI,
    VerdictResult,
    clopper_pearson_interval,
    sample_size_threshold,
    verdict,
    wilson_interval,
)
from .regression import (
    DifferenceCI,
    EffectSizes,
    FisherResult,
    McNemarResult,
    RegressionResult,
    ZTestResult,
    effect_sizes,
    fisher_exact_test,
    mcnemar_exact,
    newcombe_interval,
    regression_power,
    regression_verdict,
    regression_verdicts,
    sample_size_regression,
    two_proportion_ztest,
)
from .sprt import (
    SPRT,
    SPRTCharacteristics,
    SPRTDesign,
    SPRTState,
    beta_prior_llr,
    sprt_design,
    sprt_expected_n,
    sprt_operating_characteristics,
    sprt_test,
)

__all__ = [
    "AdjustedPValues",
    "BayesResult",
    "BernoulliCUSUM",
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
    "bayes_regression",
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
    "regression_power",
    "regression_verdict",
    "regression_verdicts",
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
