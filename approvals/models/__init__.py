from .audit import AuditEntry
from .batches import Batch, BatchItem, FollowedAgent
from .claims import CallClaim
from .ended import EndedRun
from .executions import RequestExecution
from .grants import GrantRecord
from .health import HealthCount, HealthWatermark
from .holds import HeldDecision
from .live import LiveEvent
from .notifications import (
    CallReminder,
    Notification,
    NotificationCall,
    NotificationMode,
    NotificationPreference,
    ServedAddress,
)
from .requests import ApprovalRequest, ExternalAgent
from .rules import RoutingRule
from .runs import ChosenRunId, ParkedCallRecord, RunRecord, ThreadMessage
from .suggestions import GrantSuggestionRecord, SuggestionChoice
from .tokens import ApiToken
from .webhooks import WebhookDelivery, WebhookEndpoint

__all__ = [
    "ApiToken",
    "ApprovalRequest",
    "AuditEntry",
    "Batch",
    "BatchItem",
    "CallClaim",
    "CallReminder",
    "ChosenRunId",
    "EndedRun",
    "ExternalAgent",
    "FollowedAgent",
    "GrantRecord",
    "GrantSuggestionRecord",
    "HealthCount",
    "HealthWatermark",
    "HeldDecision",
    "LiveEvent",
    "Notification",
    "NotificationCall",
    "NotificationMode",
    "NotificationPreference",
    "ParkedCallRecord",
    "RequestExecution",
    "RoutingRule",
    "RunRecord",
    "ServedAddress",
    "SuggestionChoice",
    "ThreadMessage",
    "WebhookDelivery",
    "WebhookEndpoint",
]
