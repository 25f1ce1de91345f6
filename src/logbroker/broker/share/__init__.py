"""Share groups (KIP-932): see `coordinator`."""

from .coordinator import ShareConfig, ShareCoordinator, ShareError, ShareStore

__all__ = ["ShareConfig", "ShareCoordinator", "ShareError", "ShareStore"]
