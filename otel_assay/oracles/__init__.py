"""Oracles judged on recorded traces: behavioural contracts and metamorphic relations."""

from .. import _lazy_exports

_EXPORTS = {
    "Contract": ".contracts", "ContractError": ".contracts", "ContractResults": ".contracts",
    "ContractVerdict": ".contracts", "evaluate": ".contracts", "outcome_from_contracts": ".contracts",
    "parse_contracts": ".contracts", "verdicts": ".contracts",
}
__all__ = sorted(_EXPORTS)
__getattr__ = _lazy_exports(__name__, _EXPORTS)  # the CLI imports this package at start-up
