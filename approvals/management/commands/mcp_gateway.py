"""``manage.py mcp_gateway --config FILE [--port N [--host H]] [--session NAME]``.

Serves the MCP approval gateway (``approvals.mcp``) the configuration file describes: over stdio
(the default: an MCP client launches this command), or over streamable HTTP at
``http://HOST:PORT/mcp`` with ``--port``. ``--session`` names a stdio client's session (its calls'
thread), so that a client launching the gateway again with the same name finds the calls it asked
before; without it each process is a session of its own. The format is in docs/mcp-gateway.md.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from approvals.mcp import config as gateway_config
from approvals.mcp.gateway import Gateway
from approvals.mcp.server import serve_http, serve_stdio


class Command(BaseCommand):
    help = "Serve the MCP approval gateway in front of the upstream MCP servers a configuration names."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--config", required=True, help="The configuration file (TOML, or .json).")
        parser.add_argument("--port", type=int, default=None, help="Serve streamable HTTP on this port.")
        parser.add_argument("--host", default="127.0.0.1", help="The address to serve HTTP on.")
        parser.add_argument("--session", default=None, help="A stdio client's session name.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            config = gateway_config.load(options["config"])
        except gateway_config.ConfigError as exc:
            raise CommandError(str(exc)) from None
        gateway = Gateway(config)
        port = options["port"]
        if port is not None and not 0 < port < 65536:
            raise CommandError("--port: a port number from 1 to 65535")
        try:
            if port is None:
                session = options["session"] or f"stdio-{uuid.uuid4().hex}"
                asyncio.run(serve_stdio(gateway, session=session))
            else:
                self.stderr.write(f"MCP gateway {config.agent!r}: http://{options['host']}:{port}/mcp")
                asyncio.run(serve_http(gateway, host=options["host"], port=port))
        except gateway_config.ConfigError as exc:
            raise CommandError(str(exc)) from None
        except KeyboardInterrupt:
            pass
