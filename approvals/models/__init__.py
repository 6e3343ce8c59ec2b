from .audit import AuditEntry
from .live import LiveEvent
from .runs import ParkedCallRecord, RunRecord, ThreadMessage
from .tokens import ApiToken
from .webhooks import WebhookDelivery, WebhookEndpoint

__all__ = [
    "ApiToken",
    "AuditEntry",
    "LiveEvent",
    "ParkedCallRecord",
    "RunRecord",
    "ThreadMessage",
    "WebhookDelivery",
    "WebhookEndpoint",
]
