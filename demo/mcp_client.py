"""An MCP client of the demo gateway (``make mcp-demo``, with ``make run`` up): the official SDK's
``Client`` asks the gateway on http://127.0.0.1:8765/mcp to add a note, then an "ops-" note, which
waits at the desk until a reviewer decides it (the gateway's progress notifications say so).

    .venv/bin/python demo/mcp_client.py [URL]
"""

from __future__ import annotations

import asyncio
import sys

from mcp import Client

URL = "http://127.0.0.1:8765/mcp"


async def progress(progress: float, total: float | None, message: str | None) -> None:
    print(f"  ... {message}")


async def main(url: str) -> None:
    async with Client(url) as client:
        tools = (await client.list_tools()).tools
        print("Tools through the gateway:", ", ".join(tool.name for tool in tools))
        plain = await client.call_tool("notes.add_note", {"title": "lunch", "text": "12:30"})
        print("notes.add_note lunch ->", plain.content[0].text if plain.content else plain)  # type: ignore[union-attr]
        print("notes.add_note ops-deploy: needs a reviewer (open the queue and decide it)")
        asked = await client.call_tool(
            "notes.add_note",
            {"title": "ops-deploy", "text": "Deploy on Friday"},
            progress_callback=progress,
        )
        outcome = "refused" if asked.is_error else "done"
        print(f"notes.add_note ops-deploy -> {outcome}:", asked.content[0].text if asked.content else asked)  # type: ignore[union-attr]


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else URL))
