from .audit import AuditEntry
from .ended import EndedRun
from .live import LiveEvent
from .runs import ParkedCallRecord, RunRecord, ThreadMessage
from .tokens import ApiToken

__all__ = [
    "ApiToken",
    "AuditEntry",
    "EndedRun",
    "LiveEvent",
    "ParkedCallRecord",
    "RunRecord",
    "ThreadMessage",
]
