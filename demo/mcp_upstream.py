"""A harmless MCP server for the demo gateway (``demo/mcp_gateway.toml``): notes kept in memory.

It runs as the gateway's upstream (``python demo/mcp_upstream.py``, over stdio; ``--http PORT`` serves
streamable HTTP instead). Nothing it does leaves the process: "deleting" a note forgets it.
"""

from __future__ import annotations

import sys

from mcp.server import MCPServer

server = MCPServer("demo-notes", instructions="Notes kept in memory, for the Countersign demo gateway.")
NOTES: dict[str, str] = {"welcome": "Calls through the gateway that need a human wait at the desk."}


@server.tool()
def list_notes() -> list[str]:
    """The titles of the notes."""
    return sorted(NOTES)


@server.tool()
def read_note(title: str) -> str:
    """A note's text."""
    return NOTES.get(title, f"No note {title!r}")


@server.tool()
def add_note(title: str, text: str) -> str:
    """Keep a note under a title (replacing one of the same title)."""
    NOTES[title] = text
    return f"Noted {title!r}"


@server.tool()
def delete_note(title: str) -> str:
    """Forget a note."""
    return f"Deleted {title!r}" if NOTES.pop(title, None) is not None else f"No note {title!r}"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run(transport="streamable-http", port=int(sys.argv[2]))
    else:
        server.run()
