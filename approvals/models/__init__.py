from .audit import AuditEntry
from .live import LiveEvent
from .runs import ParkedCallRecord, RunRecord, ThreadMessage

__all__ = [
    "AuditEntry",
    "LiveEvent",
    "ParkedCallRecord",
    "RunRecord",
    "ThreadMessage",
]
