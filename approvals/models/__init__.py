from .audit import AuditEntry
from .batches import Batch, BatchItem, FollowedAgent
from .live import LiveEvent
from .runs import ParkedCallRecord, RunRecord, ThreadMessage

__all__ = [
    "AuditEntry",
    "Batch",
    "BatchItem",
    "FollowedAgent",
    "LiveEvent",
    "ParkedCallRecord",
    "RunRecord",
    "ThreadMessage",
]
