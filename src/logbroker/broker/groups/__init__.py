"""The group coordinator: classic (JoinGroup/SyncGroup) and KIP-848 consumer groups, committed offsets.

Layout: `model` (types) <- `classic`, `consumer` (state machines), `offsets` <- `coordinator` (routing,
persistence through `store`, sweeper). Handlers use the `Coordinator` and the types exported here.
"""

from .coordinator import Coordinator
from .model import (
    ClassicGroup,
    ClassicMember,
    Committed,
    ConsumerGroup,
    ConsumerHeartbeat,
    ConsumerMember,
    CoordinatorConfig,
    Group,
    GroupError,
    GroupState,
    HeartbeatResult,
    JoinRequest,
    JoinResult,
    LeaveResult,
    MemberLeft,
    SyncResult,
)
from .store import GroupStore

__all__ = [
    "ClassicGroup",
    "ClassicMember",
    "Committed",
    "ConsumerGroup",
    "ConsumerHeartbeat",
    "ConsumerMember",
    "Coordinator",
    "CoordinatorConfig",
    "Group",
    "GroupError",
    "GroupState",
    "GroupStore",
    "HeartbeatResult",
    "JoinRequest",
    "JoinResult",
    "LeaveResult",
    "MemberLeft",
    "SyncResult",
]
