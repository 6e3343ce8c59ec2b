"""The websocket that tells open pages what changed."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from approvals.access import visible_agent_ids
from approvals.live import agent_group, fanout, relay, run_group
from approvals.registry import get_runtime

UNAUTHENTICATED = 4401


class LiveConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """Joins the groups of the agents the logged-in user may see; forwards their run events.

    A page showing one run may also ask for that run's output: ``{"subscribe_run": "<run id>"}``.
    """

    agent_ids: list[str]
    joined: list[str]
    accepted = False

    async def connect(self) -> None:
        self.agent_ids, self.joined = [], []
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=UNAUTHENTICATED)
            return
        self.agent_ids = await database_sync_to_async(visible_agent_ids)(user)
        for agent_id in self.agent_ids:
            await self._join(agent_group(agent_id))
        await relay.ensure_started()
        await self.accept()
        self.accepted = True
        await self.send_json({"type": "hello", "agents": self.agent_ids})

    async def _join(self, group: str) -> None:
        if group in self.joined:
            return
        # Through this process's fan-out, not a layer channel of this socket's own (see live.Fanout).
        await fanout.join(group, self)
        self.joined.append(group)

    async def disconnect(self, code: int) -> None:
        for group in self.joined:
            await fanout.leave(group, self)
        self.joined = []

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        run_id = content.get("subscribe_run") if isinstance(content, dict) else None
        if not isinstance(run_id, str) or not run_id or len(run_id) > 200:
            await self.send_json({"type": "error", "error": "expected {'subscribe_run': '<run id>'}"})
            return
        if await database_sync_to_async(self._may_watch)(run_id):
            await self._join(run_group(run_id))
            await self.send_json({"type": "subscribed", "run_id": run_id})
        else:
            # Same answer for a foreign run and an unknown one: nothing about other agents leaks.
            await self.send_json({"type": "error", "error": "unknown run", "run_id": run_id})

    def _may_watch(self, run_id: str) -> bool:
        run = get_runtime().storage.get_run(run_id)
        if run is not None:
            return run.agent_id in self.agent_ids
        # A run that already ended: allowed if the audit trail shows it belongs to a visible agent.
        from approvals.models import AuditEntry

        return AuditEntry.objects.filter(run_id=run_id, agent_id__in=self.agent_ids).exists()

    async def forward(self, message: dict[str, Any]) -> None:
        """A group's message, from ``live.fanout``: already encoded once for every page."""
        if not self.accepted:
            # Joined, not yet accepted (sending now would accept the socket behind connect's back).
            # Nothing is lost: the page refetches everything once its socket is open.
            return
        if message["type"] == "run.event":
            if message["event"].get("agent_id") in self.agent_ids:
                await self.send(text_data=message["text"])
        elif message["type"] == "run.chunk":
            await self.send(text_data=message["text"])
