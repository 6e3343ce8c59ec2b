"""An upstream MCP server for the gateway's tests (``tests/approvals/mcp/``), built with the SDK's own
``MCPServer``: a harmless tool, dangerous ones, and one the gateway hides.

``python tests/support/mcp_upstream.py --log FILE [--http PORT]``: over stdio, or streamable HTTP on
PORT. Every call of a tool that changes something is appended to FILE as a JSON line, so a test can
count how often the upstream really ran it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mcp.server import MCPServer

server = MCPServer("test-files")
LOG: Path | None = None


def _record(tool: str, **args: object) -> None:
    assert LOG is not None
    with LOG.open("a", encoding="utf-8") as log:
        log.write(json.dumps({"tool": tool, "args": args}) + "\n")


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
def delete_file(path: str, force: bool = False) -> str:
    """Delete a file (it only writes down that it would)."""
    _record("delete_file", path=path, force=force)
    return f"deleted {path}"


@server.tool()
def write_file(path: str, text: str) -> str:
    """Write a file (it only writes down that it would)."""
    _record("write_file", path=path, text=text)
    return f"wrote {len(text)} characters to {path}"


@server.tool()
def shutdown() -> str:
    """Stop the machine (the gateway hides it)."""
    _record("shutdown")
    return "stopped"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--http", type=int, default=None)
    options = parser.parse_args()
    LOG = Path(options.log)
    if options.http is None:
        server.run()
    else:
        server.run(transport="streamable-http", port=options.http)
