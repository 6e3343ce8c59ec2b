"""Running an approved request's call exactly once, for hosts that run it themselves (the MCP gateway).

An external agent runs its approved call in its own process and reports what it did
(``requests.report``). A host inside Countersign that runs the call for its clients (``approvals.mcp``)
must run it once per request, though its clients may ask again (a reconnect, a retry, another
process): it ``claim``s the request first, and only the claim's winner runs the call; it then
``finish``es it, keeping the answer for whoever asks again and reporting it on the request, so the
run's record reads shown, decided, executed.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals.models import ApprovalRequest, RequestExecution
from approvals.services import requests

logger = logging.getLogger(__name__)

#: The largest answer kept for a client that asks again (in its JSON form); a larger one is replaced
#: by a note saying so (the client that asked first got it whole).
MAX_KEPT_BYTES = 1_000_000


def claim(row: ApprovalRequest) -> tuple[RequestExecution, bool]:
    """The request's execution: claimed now (True: run the call), or someone's before (False)."""
    try:
        with transaction.atomic():
            return RequestExecution.objects.create(request=row), True
    except IntegrityError:
        return RequestExecution.objects.get(request=row), False


def finish(execution: RequestExecution, *, result: dict[str, Any], ok: bool, output: str, actor: str) -> None:
    """Keep what the call answered and report it on the request (once: the claim's winner calls this)."""
    if len(json.dumps(result, default=str)) > MAX_KEPT_BYTES:
        note = f"(The answer was over {MAX_KEPT_BYTES:,} bytes: the client that asked first got it.)"
        result = {"content": [{"type": "text", "text": note}], "isError": not ok}
    RequestExecution.objects.filter(pk=execution.pk).update(finished_at=timezone.now(), result=result)
    try:
        requests.report(execution.request, ok=ok, output=output, actor=actor)
    except requests.RequestRefused as exc:  # reported already (by a token of the agent): keep theirs
        logger.warning("Request %s: the gateway's report was refused: %s", execution.request_id, exc.message)


def alive(execution: RequestExecution) -> None:
    """The claimer is still running the call (``kept(...).alive_at``, for whoever waits for it)."""
    RequestExecution.objects.filter(pk=execution.pk).update(alive_at=timezone.now())


def kept(execution: RequestExecution) -> RequestExecution:
    """The execution as it stands now."""
    return RequestExecution.objects.get(pk=execution.pk)
