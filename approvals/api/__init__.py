"""The HTTP API: Mastra's human-in-the-loop routes under ``/api/``, wire-compatible with
``@mastra/client-js`` (see docs/architecture.md), authenticated by per-user Bearer tokens."""
