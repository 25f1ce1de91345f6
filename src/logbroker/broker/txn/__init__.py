"""Transactions: the coordinator of transactional ids and its durable state."""

from .coordinator import InitResult, TxnCoordinator, TxnSettings, TxnStore
from .model import TxnMeta, TxnState

__all__ = ["InitResult", "TxnCoordinator", "TxnMeta", "TxnSettings", "TxnState", "TxnStore"]
