from .audit import AuditEntry
from .decided import DecidedCall
from .live import LiveEvent
from .runs import ParkedCallRecord, RunRecord, ThreadMessage

__all__ = [
    "AuditEntry",
    "DecidedCall",
    "LiveEvent",
    "ParkedCallRecord",
    "RunRecord",
    "ThreadMessage",
]
