"""The MCP approval gateway: an MCP server in front of upstream MCP servers, asking the desk first.

``config`` reads its configuration file, ``upstream`` holds its clients of the upstream servers,
``gateway`` lists their tools and makes calls (parked as approval requests of the gateway's external
agent when they need a human), ``server`` serves it over stdio or streamable HTTP
(``manage.py mcp_gateway``). Described in docs/mcp-gateway.md.
"""
