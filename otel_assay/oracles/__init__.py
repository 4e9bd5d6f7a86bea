"""Oracles judged on recorded traces: behavioural contracts (and metamorphic relations)."""

from .contracts import (Contract, ContractError, ContractResults, ContractVerdict, evaluate, outcome_from_contracts,
                        parse_contracts, regressions, verdicts)

__all__ = ["Contract", "ContractError", "ContractResults", "ContractVerdict", "evaluate", "outcome_from_contracts",
           "parse_contracts", "regressions", "verdicts"]
