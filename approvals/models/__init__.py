from .audit import AuditEntry
from .batches import Batch, BatchItem, FollowedAgent
from .live import LiveEvent
from .runs import ParkedCallRecord, RunRecord, ThreadMessage
from .tokens import ApiToken

__all__ = [
    "ApiToken",
    "AuditEntry",
    "Batch",
    "BatchItem",
    "FollowedAgent",
    "LiveEvent",
    "ParkedCallRecord",
    "RunRecord",
    "ThreadMessage",
]
