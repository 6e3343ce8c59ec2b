"""A chat that hands a risky call to the desk, over AG-UI (docs/any-agent.md):
``python -m examples.ag_ui_chat --agent finance "pay INV-2231 to Acme Supplies, $1,250.00"``.

Any AG-UI front end does what this terminal chat does. It sends the message to
``/api/ag-ui/agents/<agent>`` and prints the agent's words and tool calls as they stream. When the
run stops on a call that needs a human, the run ends with an interrupt, and the same call waits in
Countersign's queue. If the desk's rules let this person decide it, the chat asks them
(``--answer approve`` or ``decline`` answers without asking). Otherwise it says so and keeps waiting
on the same stream until a reviewer decides at the desk, then prints how the run went on. Set
``COUNTERSIGN_URL`` and ``COUNTERSIGN_TOKEN`` (a person's API token, from the dashboard's API
tokens page).
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from typing import Any

import httpx
from ag_ui.core import Event, Interrupt, ResumeEntry, RunAgentInput, UserMessage
from pydantic import TypeAdapter

EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


def say(text: str) -> None:
    print(text, flush=True)


def send(client: httpx.Client, url: str, body: RunAgentInput) -> list[Interrupt]:
    """One AG-UI run: print what streams, and return the interrupts it ended with."""
    payload = body.model_dump(mode="json", by_alias=True, exclude_none=True)
    with client.stream("POST", url, json=payload, headers={"Accept": "text/event-stream"}) as answer:
        if answer.status_code != 200:
            answer.read()
            raise SystemExit(f"{answer.status_code}: {answer.text}")
        texted = False
        for line in answer.iter_lines():
            if line.startswith("data: "):
                event = EVENTS.validate_json(line.removeprefix("data: "))
                texted = texted or event.type.value == "TEXT_MESSAGE_CONTENT"
                if event.type.value == "RUN_FINISHED" and event.result and not texted:
                    say(str(event.result))  # (a run that ended before this resume: its answer)
                interrupts = show(event)
                if interrupts is not None:
                    return interrupts
    return []


def show(event: Any) -> list[Interrupt] | None:
    """Print one event; the interrupts once the run ends (None while it goes on)."""
    kind = event.type.value
    if kind == "TEXT_MESSAGE_CONTENT":
        print(event.delta, end="", flush=True)
    elif kind == "TEXT_MESSAGE_END":
        say("")
    elif kind == "TOOL_CALL_START":
        print(f"-> {event.tool_call_name}", end=" ", flush=True)
    elif kind == "TOOL_CALL_ARGS":
        say(event.delta)
    elif kind == "TOOL_CALL_RESULT":
        say(f"<- {event.content}")
    elif kind == "CUSTOM":
        value = event.value
        who = f" by {value['decidedBy']}" if value.get("decidedBy") else ""
        say(f"[desk] {event.name.removeprefix('countersign.')}{who}: {value.get('message', '')}".rstrip(": "))
    elif kind == "RUN_ERROR":
        say(f"[error] {event.message} ({event.code})")
        return []
    elif kind == "RUN_FINISHED":
        outcome = event.outcome
        return list(outcome.interrupts) if outcome is not None and outcome.type == "interrupt" else []
    return None


def answer_of(interrupt: Interrupt, mode: str, base: str) -> ResumeEntry:
    """This person's answer to the interrupt, or (not theirs to decide) a wait for the desk."""
    meta = (interrupt.metadata or {}).get("countersign", {})
    say(f"[paused] {interrupt.message}")
    if not meta.get("mayDecide"):
        why = meta.get("refusal", "the desk's rules")
        say(
            f"[desk] not yours to decide ({why}): waiting for a reviewer at {base}{meta.get('dashboard', '')}"
        )
        return ResumeEntry(
            interrupt_id=interrupt.id, status="resolved", metadata={"countersign": {"wait": True}}
        )
    if mode == "ask":
        mode = "approve" if input("approve? [y/N] ").strip().lower().startswith("y") else "decline"
    if meta.get("kind") == "suspend":
        raise SystemExit("This call asks for data (its responseSchema): answer it at the desk.")
    return ResumeEntry(interrupt_id=interrupt.id, status="resolved", payload={"approved": mode == "approve"})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("message")
    parser.add_argument("--agent", default=os.environ.get("COUNTERSIGN_AGENT", "finance"))
    parser.add_argument("--answer", choices=["ask", "approve", "decline"], default="ask")
    args = parser.parse_args(argv)
    base = os.environ.get("COUNTERSIGN_URL", "http://127.0.0.1:8000").rstrip("/")
    url = f"{base}/api/ag-ui/agents/{args.agent}"
    headers = {"Authorization": f"Bearer {os.environ['COUNTERSIGN_TOKEN']}"}
    thread = f"chat-{uuid.uuid4()}"
    message = UserMessage(id=str(uuid.uuid4()), content=args.message)
    with httpx.Client(headers=headers, timeout=httpx.Timeout(30, read=None)) as client:
        interrupts = send(
            client, url, RunAgentInput(thread_id=thread, run_id=str(uuid.uuid4()), messages=[message])
        )
        while interrupts:
            resume = [answer_of(interrupt, args.answer, base) for interrupt in interrupts]
            body = RunAgentInput(thread_id=thread, run_id=str(uuid.uuid4()), messages=[], resume=resume)
            interrupts = send(client, url, body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
