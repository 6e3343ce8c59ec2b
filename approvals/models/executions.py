"""``RequestExecution``: a host's run of an approved request's call, for hosts that run it themselves.

The MCP gateway (``approvals.mcp``) calls its upstream tool once a request is approved. So that it does
so once per request, even when its client reconnects and asks again while the first call is still
running, or from another process, it claims the request first (the row, unique per request) and keeps
what the call answered, which is what a client asking again is given.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.utils import timezone

from .requests import ApprovalRequest


class RequestExecution(models.Model):
    request = models.OneToOneField(ApprovalRequest, on_delete=models.CASCADE, related_name="execution")
    started_at = models.DateTimeField(default=timezone.now)
    #: The claimer's last sign of life while the call runs: one that stops renewing it died.
    alive_at = models.DateTimeField(default=timezone.now)
    #: When the call answered (None: running, or its process died while it ran).
    finished_at = models.DateTimeField(null=True, blank=True)
    #: What the call answered, as the host hands it to whoever asks again (its wire form).
    result = models.JSONField(null=True, blank=True)

    objects: ClassVar[models.Manager[RequestExecution]] = models.Manager()

    def __str__(self) -> str:
        return f"execution of {self.request_id}"
