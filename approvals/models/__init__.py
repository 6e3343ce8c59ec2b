from .audit import AuditEntry
from .ended import EndedRun
from .live import LiveEvent
from .runs import ParkedCallRecord, RunRecord, ThreadMessage

__all__ = [
    "AuditEntry",
    "EndedRun",
    "LiveEvent",
    "ParkedCallRecord",
    "RunRecord",
    "ThreadMessage",
]
