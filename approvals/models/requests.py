"""External agents and their approval requests (``/api/v1/approval-requests``).

An ``ExternalAgent`` is an agent that runs in another process and only asks for decisions: registered
here (``manage.py external_agent``, the admin), it is served as an ``agents_runtime.ExternalAgent``
(``approvals.agents.sync_external``) like any agent of the runtime, and acts through tokens of its
own (``ApiToken.external_agent``) that may only create and read its requests.

An ``ApprovalRequest`` is the request as it was asked: its run (``run_id``, the request's id) lives in
the run store like any run and its decision in the audit log; this row keeps what was asked (so the
request reads the same after its run ended), the idempotency key it was asked with, and what the agent
reported when it ran the call.
"""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

#: An external agent's id: what URLs, groups (``agent:<id>``) and the runtime take.
AGENT_ID = RegexValidator(
    r"^[a-z0-9][a-z0-9_-]{0,63}$",
    "1 to 64 lower-case letters, digits, '_' or '-', starting with a letter or digit",
)


class ExternalAgent(models.Model):
    agent_id = models.CharField(max_length=64, unique=True, validators=[AGENT_ID])
    name = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    #: Rules by tool name, as ``agents_runtime.ToolRules.from_json`` reads them: ``{"deploy":
    #: {"approvals": 2, "separate_duties": true, "risky": {"env": ["production"]}}}``.
    tools = models.JSONField(default=dict, blank=True)
    #: Who its requests are started by (separation of duties refuses them): an account of its own,
    #: which signs in nowhere (no usable password, no group).
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="external_agent", editable=False
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["agent_id"]
        verbose_name = "external agent"

    def __str__(self) -> str:
        return self.name or self.agent_id


class ApprovalRequest(models.Model):
    #: The request's id, and its run's.
    run_id = models.CharField(max_length=255, unique=True)
    agent_id = models.CharField(max_length=64)
    tool_call_id = models.CharField(max_length=128)
    tool_name = models.CharField(max_length=128)
    args = models.JSONField()
    title = models.CharField(max_length=200, blank=True)
    #: What the call would do, as the agent that asked told it (``agents_runtime.previews``).
    preview = models.JSONField(null=True, blank=True)
    thread_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    resource_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    deadline_at = models.DateTimeField(null=True, blank=True)
    deadline_default = models.CharField(max_length=16, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    #: ``Idempotency-Key``: a retry with the same key and body finds this row (the unique constraint
    #: settles two at once); ``body_digest`` tells a retry from another request under the same key.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    body_digest = models.CharField(max_length=64, blank=True)
    #: What the agent reported when it ran the approved call (once).
    result_ok = models.BooleanField(null=True, blank=True)
    result_output = models.TextField(blank=True)
    result_reported_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[models.Manager[ApprovalRequest]] = models.Manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent_id", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="approval_request_idempotency_key",
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent_id}/{self.run_id} ({self.tool_name})"
