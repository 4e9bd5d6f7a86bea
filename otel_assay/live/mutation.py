"""Mutation testing of agents (paper §5): does the test suite notice when the agent changes?

An agent is an :class:`AgentConfig` ``(prompt, tools, model, context)`` and a user factory
``make_agent(config) -> callable``. Mutation operators (Defs. 5.2-5.5) change one component:

============ =================================================================
class        operators
============ =================================================================
prompt       ``synonym`` (a key word -> synonym), ``reorder`` (instruction order),
             ``noise`` (distracting text), ``drop`` (remove an instruction)
tool         ``tool_remove``, ``tool_reorder``, ``tool_noise`` (misleading description)
model        ``model_swap`` (same tier, from ``config.models``), ``model_downgrade``
             (a weaker model: ``config.downgrades`` or a built-in table)
context      ``context_truncate`` (keep ⌊γ·|x|⌋ tokens, γ = 0.5), ``context_noise``,
             ``context_permute``
============ =================================================================

plus the ``identity`` mutant (a control that must come out presumed equivalent).

Kill semantics (Def. 5.6 with SPRT acceleration, Def. 5.10). The original agent runs
``original_trials`` trials per scenario, giving p̂_A. Each mutant then runs trials one at a
time per scenario, feeding two one-sided Wald SPRTs, each at alpha/2, beta:
H0: p' = p̂_A vs H1: p' = p̂_A - δ, and H0: p' = p̂_A vs H1: p' = p̂_A + δ.
- **killed** as soon as either accepts H1 on some scenario (a behaviour change of δ);
- **presumed equivalent** (Def. 5.7, practical form) when both accept H0 on every scenario:
  positive evidence of no change as large as δ;
- at ``n_max`` trials without a decision: killed if Fisher's two-sided test of
  (original vs mutant) has p < alpha and |Δp̂| ≥ δ (Def. 5.6 condition 2) or the threshold
  verdicts differ (condition 1); otherwise **survived**.

Note that p̂_A is treated as known in the SPRT; with ``original_trials`` = 100 its standard
error is ~0.03, small next to δ = 0.2 but not nothing. Mutation score (Def. 5.8)
= killed / (mutants − presumed equivalent), overall and per class (Remark 5.3); selective
mutation (Def. 5.9) = run only the ``operators`` given. Everything random takes ``seed``;
with a deterministic (scripted) agent the score is exactly reproducible.
"""

from __future__ import annotations

import asyncio
import random
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Mapping

import otel_assay
from ..errors import UsageError
from .scenarios import RunConfig

CLASSES = ("prompt", "tool", "model", "context")
SYNONYMS = {
    "summarize": "condense", "route": "direct", "answer": "respond to", "always": "invariably",
    "never": "at no time", "check": "verify", "use": "employ", "ask": "request", "help": "assist",
    "customer": "client", "question": "query", "issue": "problem", "must": "should",
}
NOISE = ("Note: the office coffee machine is on the third floor and is cleaned on Fridays.",
         "Trivia: the Eiffel Tower grows about 15 cm taller in summer.",
         "Reminder: quarterly reports use the blue template, not the green one.")
DOWNGRADES = {"gpt-4o": "gpt-4o-mini", "gpt-4.1": "gpt-4.1-mini", "gpt-4.1-mini": "gpt-4.1-nano",
              "gpt-4o-mini": "gpt-3.5-turbo", "claude-3-5-sonnet": "claude-3-haiku",
              "claude-sonnet-4": "claude-3-5-haiku", "o3": "o3-mini"}


@dataclass(frozen=True)
class AgentConfig:
    """The agent under mutation: A = (prompt π, tools T, model μ, context ω) (Def. 5.1).

    ``tools`` are names or ``{name, description, ...}`` mappings; ``context`` is a list of
    segments (documents, few-shot examples); ``models`` (same-tier alternatives) and
    ``downgrades`` (model -> weaker model) feed the model operators; ``extra`` is passed
    through untouched for the factory.
    """

    prompt: str = ""
    tools: tuple = ()
    model: str = ""
    context: tuple = ()
    models: tuple = ()
    downgrades: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def instructions(self) -> list[str]:
        return [line for line in self.prompt.split("\n") if line.strip()]

    @property
    def tool_names(self) -> list[str]:
        return [str(tool_dict(t).get("name")) for t in self.tools]

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["downgrades"], d["extra"] = dict(self.downgrades), dict(self.extra)
        d["tools"] = [t if isinstance(t, str) else tool_dict(t) for t in self.tools]
        d["context"], d["models"] = list(self.context), list(self.models)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "agent config") -> "AgentConfig":
        if not isinstance(d, Mapping):
            raise UsageError(f"{where}: an agent config is a mapping with prompt, tools, model, context")
        unknown = sorted(set(d) - {"prompt", "tools", "model", "context", "models", "downgrades", "extra"})
        if unknown:
            raise UsageError(f"{where}: unknown key {unknown[0]!r}; known: prompt, tools, model, context, "
                             "models, downgrades, extra")
        tools = d.get("tools") or ()
        if not isinstance(tools, (list, tuple)):
            raise UsageError(f"{where}: tools must be a list")
        ctx = d.get("context") or ()
        ctx = (ctx,) if isinstance(ctx, str) else tuple(ctx)
        return cls(str(d.get("prompt") or ""), tuple(_freeze(t) for t in tools), str(d.get("model") or ""), ctx,
                   tuple(d.get("models") or ()), dict(d.get("downgrades") or {}), dict(d.get("extra") or {}))

    @classmethod
    def load(cls, path) -> "AgentConfig":
        # imported here: `otel-assay` loads this module at start-up (for `mutate --help`),
        # and yaml costs 0.14 s
        import yaml

        from .. import yamlfile
        try:
            with open(path, encoding="utf-8") as f:
                doc = yamlfile.load(f.read(), str(path))
        except OSError as e:
            raise UsageError(f"cannot read agent config {path}: {e.strerror}") from None
        except yaml.YAMLError as e:
            raise UsageError(f"{path}: not valid YAML: {e}") from None
        return cls.from_dict(doc, str(path))


def _freeze(t):
    return t if isinstance(t, str) else tuple(sorted(dict(t).items()))


def tool_dict(t) -> dict:
    return {"name": t} if isinstance(t, str) else dict(t)


# ================================================================== operators
def _synonym(c: AgentConfig, rng: random.Random):
    words = [w for w in SYNONYMS if w in c.prompt.lower()]
    if not words:
        return None
    w = rng.choice(sorted(words))
    new = re.sub(rf"\b{w}\b", SYNONYMS[w], c.prompt, count=1, flags=re.IGNORECASE)
    return (replace(c, prompt=new), f"'{w}' -> '{SYNONYMS[w]}'") if new != c.prompt else None


def _permuted(items, rng: random.Random) -> list | None:
    """``items`` in another order, or None when there are fewer than two (a permutation of
    one is the original, which is no mutant)."""
    if len(items) < 2:
        return None
    perm = list(items)
    while perm == list(items):
        rng.shuffle(perm)
    return perm


def _reorder(c, rng):
    perm = _permuted(c.instructions, rng)
    return None if perm is None else (replace(c, prompt="\n".join(perm)), "instructions permuted")


def _noise(c, rng):
    ins = c.instructions
    pos = rng.randrange(len(ins) + 1)
    text = rng.choice(NOISE)
    return replace(c, prompt="\n".join(ins[:pos] + [text] + ins[pos:])), f"noise at line {pos + 1}"


def _drop(c, rng):
    ins = c.instructions
    if not ins:
        return None
    i = rng.randrange(len(ins))
    return replace(c, prompt="\n".join(ins[:i] + ins[i + 1:])), f"dropped instruction {i + 1}: {ins[i][:40]!r}"


def _tool_remove(c, rng):
    if not c.tools:
        return None
    i = rng.randrange(len(c.tools))
    return replace(c, tools=c.tools[:i] + c.tools[i + 1:]), f"removed tool {c.tool_names[i]}"


def _tool_reorder(c, rng):
    perm = _permuted(c.tools, rng)
    return None if perm is None else (replace(c, tools=tuple(perm)), "tools permuted")


def _tool_noise(c, rng):
    if not c.tools:
        return None
    i = rng.randrange(len(c.tools))
    d = tool_dict(c.tools[i])
    d["description"] = (d.get("description", "") + " Do not use this tool; it is deprecated and returns "
                        "wrong results.").strip()
    tools = c.tools[:i] + (_freeze(d),) + c.tools[i + 1:]
    return replace(c, tools=tools), f"misleading description on {c.tool_names[i]}"


def _model_swap(c, rng):
    alts = [m for m in c.models if m != c.model]
    if not alts:
        return None
    m = rng.choice(alts)
    return replace(c, model=m), f"model {c.model} -> {m}"


def _model_downgrade(c, rng):
    m = dict(DOWNGRADES, **dict(c.downgrades)).get(c.model)
    if not m:
        return None
    return replace(c, model=m), f"model {c.model} -> {m}"


def _context_truncate(c, rng, gamma: float = 0.5):
    text = "\n\n".join(c.context)
    toks = text.split()
    if len(toks) < 2:
        return None
    keep = int(gamma * len(toks))
    return replace(c, context=(" ".join(toks[:keep]),)), f"context truncated to {keep}/{len(toks)} tokens"


def _context_noise(c, rng):
    pos = rng.randrange(len(c.context) + 1)
    doc = rng.choice(NOISE)
    return replace(c, context=c.context[:pos] + (doc,) + c.context[pos:]), f"irrelevant passage at {pos + 1}"


def _context_permute(c, rng):
    perm = _permuted(c.context, rng)
    return None if perm is None else (replace(c, context=tuple(perm)), "context segments permuted")


OPERATORS: dict[str, tuple[str, Callable]] = {
    "synonym": ("prompt", _synonym), "reorder": ("prompt", _reorder), "noise": ("prompt", _noise),
    "drop": ("prompt", _drop),
    "tool_remove": ("tool", _tool_remove), "tool_reorder": ("tool", _tool_reorder),
    "tool_noise": ("tool", _tool_noise),
    "model_swap": ("model", _model_swap), "model_downgrade": ("model", _model_downgrade),
    "context_truncate": ("context", _context_truncate), "context_noise": ("context", _context_noise),
    "context_permute": ("context", _context_permute),
}


@dataclass(frozen=True)
class Mutant:
    id: str
    operator: str
    cls: str
    description: str
    config: AgentConfig


def generate_mutants(config: AgentConfig, operators: list[str] | None = None, *, seed: int = 0,
                     per_operator: int = 1, identity: bool = True) -> list[Mutant]:
    """Mutants of ``config``: ``per_operator`` per operator (distinct ones; fewer when the
    operator has fewer), only the ``operators`` named (selective mutation, Def. 5.9),
    plus the identity control. Operators that do not apply (no tools, one instruction...)
    yield nothing."""
    names = list(OPERATORS) if not operators else list(operators)
    for n in names:
        if n not in OPERATORS and n not in CLASSES:
            raise UsageError(f"unknown mutation operator {n!r}; use one of {', '.join(OPERATORS)} or a class "
                             f"({', '.join(CLASSES)})")
    expanded = [op for n in names for op in ([n] if n in OPERATORS else [o for o, (c, _) in OPERATORS.items() if c == n])]
    out: list[Mutant] = []
    if identity:
        out.append(Mutant("identity", "identity", "identity", "unchanged (control)", config))
    for op in dict.fromkeys(expanded):
        cls, fn = OPERATORS[op]
        rng = random.Random(f"{seed}/{op}")
        seen: set = set()
        for attempt in range(per_operator * 5):
            if len(seen) >= per_operator:
                break
            r = fn(config, rng)
            if r is None:
                break
            cfg, desc = r
            key = repr(cfg)
            if key in seen or cfg == config:
                continue
            seen.add(key)
            out.append(Mutant(f"{op}-{len(seen)}", op, cls, desc, cfg))
    return out


# ================================================================== kill semantics
@dataclass
class MutantResult:
    mutant: Mutant
    status: str                      # killed | equivalent | survived
    killed_by: str | None = None     # scenario that killed it
    reason: str = ""
    trials: int = 0
    per_scenario: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class MutationReport:
    results: list[MutantResult]
    original: dict[str, tuple[int, int]]   # scenario -> (successes, n)
    score: float | None
    per_class: dict[str, float | None]
    trials: int
    seed: int

    def counts(self) -> dict[str, int]:
        c = {"killed": 0, "equivalent": 0, "survived": 0}
        for r in self.results:
            if r.mutant.cls != "identity":
                c[r.status] += 1
        return c

    def as_dict(self) -> dict[str, Any]:
        return {"score": self.score, "per_class": self.per_class, "counts": self.counts(), "trials": self.trials,
                "seed": self.seed, "original": {k: {"successes": a, "n": b} for k, (a, b) in self.original.items()},
                "mutants": [{"id": r.mutant.id, "operator": r.mutant.operator, "class": r.mutant.cls,
                             "description": r.mutant.description, "status": r.status, "killed_by": r.killed_by,
                             "reason": r.reason, "trials": r.trials, "scenarios": r.per_scenario}
                            for r in self.results]}


def mutation_score(results: list[MutantResult]) -> tuple[float | None, dict[str, float | None]]:
    """Def. 5.8 overall and per class (Remark 5.3); the identity control is not a mutant."""
    def ms(rs):
        live = [r for r in rs if r.status != "equivalent"]
        return None if not live else sum(r.status == "killed" for r in live) / len(live)
    real = [r for r in results if r.mutant.cls != "identity"]
    return ms(real), {c: ms([r for r in real if r.mutant.cls == c]) for c in CLASSES}


class _Shim:
    def __init__(self, scenario):
        self.scenario = scenario
        self.cfg = RunConfig(method="mutation")


def _trial(scenario, agent, version, index, pool, collector, retries: int, timeout):
    # imported here: `otel-assay` loads this module at start-up (for `mutate --help`);
    # the runner brings numpy, duckdb and the OTel SDK
    from .runner import _is_async, _one_trial

    attempt = 0
    while True:
        rec = asyncio.run(_one_trial(_Shim(scenario), index, attempt, agent, _is_async(agent), version, pool,
                                     timeout, collector))
        if rec.error_class == "infrastructure" and attempt < retries:
            attempt += 1
            continue
        return rec


def _outcomes(scenario, agent, version, start, count, pool, collector, retries, timeout, limit):
    """Counted outcomes of trials start, start+1, ... until ``count`` counted (or ``limit`` attempts)."""
    out, idx = [], start
    while len(out) < count and idx - start < limit:
        rec = _trial(scenario, agent, version, idx, pool, collector, retries, timeout)
        idx += 1
        if rec.counted:
            out.append(bool(rec.passed))
    return out, idx


def _next_indices(lake: str, version: str) -> dict[tuple[str, str], int]:
    """(version, scenario) -> the first unused trial index, for ``version`` and its mutants'
    ``version+...``: a second mutation run on the same lake continues the index sequence
    instead of writing a second trial 0, 1, ... (which breaks pairing trials by index)."""
    from .runner import query_trials  # imported here: see _trial

    rows = query_trials(lake, "SELECT version, scenario, max(trial_index) + 1 FROM trials "
                              "WHERE (version = ? OR starts_with(version, ?)) AND trial_index IS NOT NULL GROUP BY ALL",
                        [version, version + "+"])
    return {(v, sc): int(n) for v, sc, n in rows}


def run_mutation(suite, factory: Callable[[AgentConfig], Callable], config: AgentConfig, *, lake: str,
                 version: str = "mutation", operators: list[str] | None = None, seed: int = 0,
                 per_operator: int = 1, original_trials: int = 100, n_max: int = 200, delta: float = 0.2,
                 alpha: float = 0.05, beta: float = 0.1, timeout: float | None = None, retries: int = 2,
                 progress: Callable[[MutantResult], None] | None = None) -> MutationReport:
    """Run the mutation analysis of ``suite`` (its scenarios and evaluators) for ``config``.

    Trials go to the lake as version ``{version}`` (the original) and ``{version}+{mutant}``."""
    # imported here: `otel-assay` loads this module at start-up (for `mutate --help`); scipy.stats
    # (2.6 s), the statistics and the runner load only when mutants run
    from scipy.stats import fisher_exact

    from ..stats import SPRT, verdict
    from .runner import _DaemonThreads, step_collector, use_lake_or_refuse

    if not callable(factory):
        raise UsageError("the factory must be a callable make_agent(config) -> agent")

    def _make(factory, cfg):
        # the factory is the user's code: its exception is a usage error to fix there, not an
        # otel-assay bug (the usual one: treating the AgentConfig as a dict)
        try:
            return factory(cfg)
        except Exception as e:  # noqa: BLE001
            raise UsageError(f"the factory raised {type(e).__name__}: {e}; it is called as make_agent(config) "
                             f"with an otel_assay.live.mutation.AgentConfig (attributes prompt, tools, model, "
                             f"context, models, downgrades, extra)") from None
    mutants = generate_mutants(config, operators, seed=seed, per_operator=per_operator)
    use_lake_or_refuse(lake)
    first_index = _next_indices(lake, version)
    collector = step_collector()
    pool = _DaemonThreads()  # a hung trial's thread must not keep the process from exiting
    total = 0
    try:
        original_agent = _make(factory, config)
        base: dict[str, tuple[int, int]] = {}
        for sc in suite.scenarios:
            outs, _ = _outcomes(sc, original_agent, version, first_index.get((version, sc.name), 0), original_trials,
                                pool, collector, retries, timeout, 3 * original_trials)
            total += len(outs)
            if not outs:
                raise UsageError(f"scenario {sc.name!r}: no original trial counted (empty runs or errors)")
            base[sc.name] = (sum(outs), len(outs))
        results = []
        for m in mutants:
            agent = _make(factory, m.config)
            res = MutantResult(m, "equivalent")
            for sc in suite.scenarios:
                k0, n0 = base[sc.name]
                p_a = min(max(k0 / n0, 0.02), 0.98)
                tests = []
                # a move of exactly delta (down to 0, up to 1) is still a move the SPRT must look for
                if p_a - delta > -1e-9:
                    tests.append(("lower", SPRT(p_a, min(delta, p_a - 0.005), alpha / 2, beta), False))
                if 1 - p_a - delta > -1e-9:
                    tests.append(("upper", SPRT(1 - p_a, min(delta, 1 - p_a - 0.005), alpha / 2, beta), True))
                outs: list[bool] = []
                start = idx = first_index.get((f"{version}+{m.id}", sc.name), 0)
                decided = None
                while len(outs) < n_max and idx - start < 3 * n_max:
                    rec = _trial(sc, agent, f"{version}+{m.id}", idx, pool, collector, retries, timeout)
                    idx += 1
                    if not rec.counted:
                        continue
                    o = bool(rec.passed)
                    outs.append(o)
                    states = [t.update((not o) if flip else o) if not t.state.done else t.state
                              for _, t, flip in tests]
                    if any(s.decision == "FAIL" for s in states):
                        side = next(n for (n, _, _), s in zip(tests, states) if s.decision == "FAIL")
                        decided = ("killed", f"SPRT: pass rate moved {'down' if side == 'lower' else 'up'} by "
                                   f">= {delta} after {len(outs)} trials")
                        break
                    # no SPRT at all (a delta no move can reach) is no evidence of equivalence:
                    # the fixed-sample comparison at n_max decides
                    if states and all(s.decision == "PASS" for s in states):
                        decided = ("equivalent", f"SPRT: within {delta} of the original after {len(outs)} trials")
                        break
                total += len(outs)
                res.trials += len(outs)
                k1, n1 = sum(outs), len(outs)
                if decided is None and n1:
                    p = fisher_exact([[k0, n0 - k0], [k1, n1 - k1]])[1]
                    t = sc.config.threshold
                    v0, v1 = verdict(k0, n0, t, alpha).verdict, verdict(k1, n1, t, alpha).verdict
                    if p < alpha and abs(k0 / n0 - k1 / n1) >= delta:
                        decided = ("killed", f"Fisher p = {p:.3g}, |Δ| = {abs(k0 / n0 - k1 / n1):.3f} at n_max")
                    elif v0 != v1 and Verdict_is_decisive(v0, v1):
                        decided = ("killed", f"verdict changed {v0.value} -> {v1.value}")
                    else:
                        decided = ("survived", f"no decision after {n1} trials (Fisher p = {p:.3g})")
                elif decided is None:
                    decided = ("survived", "no counted trial")
                res.per_scenario[sc.name] = {"successes": k1, "n": n1, "status": decided[0], "reason": decided[1]}
                if decided[0] == "killed":
                    res.status, res.killed_by, res.reason = "killed", sc.name, decided[1]
                    break  # one scenario is enough (Def. 5.6)
                if decided[0] == "survived":
                    res.status, res.reason = "survived", decided[1]
            if res.status == "equivalent":
                res.reason = "no change of delta on any scenario (presumed equivalent, Def. 5.7)"
            results.append(res)
            if progress:
                progress(res)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        otel_assay.flush()
    score, per_class = mutation_score(results)
    return MutationReport(results, base, score, per_class, total, seed)


def Verdict_is_decisive(v0, v1) -> bool:  # noqa: N802 - reads as a predicate on two verdicts
    """Condition 1 counts a flip between decisive verdicts (PASS <-> FAIL) only."""
    return {v0.value, v1.value} == {"PASS", "FAIL"}
