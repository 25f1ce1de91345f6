"""The group coordinator: classic (JoinGroup/SyncGroup) and KIP-848 consumer groups, committed offsets."""

from .coordinator import Coordinator, Group, GroupState, Member

__all__ = ["Coordinator", "Group", "GroupState", "Member"]
