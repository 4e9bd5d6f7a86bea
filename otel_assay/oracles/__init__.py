"""Oracles judged on recorded traces: behavioural contracts and metamorphic relations."""

import importlib

_EXPORTS = {
    "Contract": "contracts", "ContractError": "contracts", "ContractResults": "contracts",
    "ContractVerdict": "contracts", "evaluate": "contracts", "outcome_from_contracts": "contracts",
    "parse_contracts": "contracts", "verdicts": "contracts",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):  # load on first use: the CLI imports this package at start-up
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
