"""Probes for the machines around the server: ``/healthz``, ``/readyz`` and ``/metrics``.

None of them needs a login, a session or a CSRF token, and none writes a session: an orchestrator
or a Prometheus server calls them without cookies (Django's session middleware saves a session only
when one was changed, and these never touch it).

- ``/healthz``: the process is up and serving (200 ``ok``); touches nothing else, not even the
  database, so a database outage does not get every server restarted.
- ``/readyz``: the database answers and the channel layer carries a message (through a group of its
  own to a channel of its own, the way live events travel), each within ``READYZ_TIMEOUT_SECONDS``;
  else 503 with a JSON body naming what failed. A load balancer stops sending pages to a server
  whose live updates cannot work.
- ``/metrics``: the queue-health figures for Prometheus (``approvals.health.metrics``), only with
  ``Authorization: Bearer <METRICS_TOKEN>``. Without a token configured it is 404 (DEBUG: open), so
  a deployment never exposes agent and tool names by default.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import uuid
from collections.abc import Coroutine
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from approvals.health import metrics as health_metrics

logger = logging.getLogger(__name__)


@csrf_exempt
@require_GET
@never_cache
def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok\n", content_type="text/plain; charset=utf-8")


def _database() -> None:
    # (One trip to the request's thread: after a timeout, a second one would wait for the first.)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    finally:
        connection.close_if_unusable_or_obsolete()


async def _channel_layer() -> None:
    """A message through a group of its own to a channel of this process, as every live event goes.

    The channel is named like the live fan-out's (``new_channel()``'s ``specific.<process id>!``):
    channels_redis reads one such name at a time per process, holding a lock while it waits, so a
    probe on a name of its own waited for the fan-out's next event. Sharing it, whichever waits
    reads for both. And through a group, not ``layer.send``: with several Redis servers
    channels_redis 4.3 writes a ``send`` to the server its whole channel name hashes to but reads the
    server its process part hashes to (django/channels#1492); a group's messages go where the
    channel is read. A probe crosses at most two servers: the one its group (new each time) hashes
    to, and the one this process's live events arrive on.
    """
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("no channel layer is configured")
    channel = await layer.new_channel()
    group = f"readyz.{uuid.uuid4().hex}"
    await layer.group_add(group, channel)
    await layer.group_send(group, {"type": "readyz.ping"})
    message = await layer.receive(channel)
    if message.get("type") != "readyz.ping":
        raise RuntimeError("the channel layer answered another message")
    # Not in a `finally`: after a timeout it could wait as long again. A group left behind by a
    # failed probe has no other member and expires with the layer's group_expiry.
    await layer.group_discard(group, channel)


async def _check(name: str, work: Coroutine[Any, Any, None], seconds: float) -> str | None:
    """None when ``work`` finished within ``seconds``; else why not (logged, not shown in full)."""
    try:
        async with asyncio.timeout(seconds):
            await work
    except TimeoutError:
        return f"{name}: no answer within {seconds:g} s"
    except Exception as error:
        logger.warning("readyz: %s failed: %r", name, error)
        return f"{name}: {type(error).__name__}"
    return None


@csrf_exempt
@require_GET
@never_cache
async def readyz(request: HttpRequest) -> HttpResponse:
    timeout = float(getattr(settings, "READYZ_TIMEOUT_SECONDS", 2.0))

    database = sync_to_async(_database, thread_sensitive=True)()
    found = await asyncio.gather(
        _check("database", database, timeout), _check("channel_layer", _channel_layer(), timeout)
    )
    failed = [f for f in found if f is not None]
    checks = {"database": found[0] or "ok", "channel_layer": found[1] or "ok"}
    if failed:
        return JsonResponse({"status": "unavailable", "failed": failed, "checks": checks}, status=503)
    return JsonResponse({"status": "ok", "checks": checks})


def metrics_allowed(request: HttpRequest) -> bool:
    """With a token configured: the request carries it; without one: only under DEBUG."""
    token = str(getattr(settings, "METRICS_TOKEN", "") or "")
    if not token:
        return bool(settings.DEBUG)
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


@csrf_exempt
@require_GET
@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    if not getattr(settings, "METRICS_TOKEN", "") and not settings.DEBUG:
        raise Http404("Metrics are off: set METRICS_TOKEN.")
    if not metrics_allowed(request):
        response = HttpResponse("A bearer token is required.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(health_metrics.exposition(), content_type=health_metrics.CONTENT_TYPE)
