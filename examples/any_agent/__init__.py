"""Agents that do not run on Countersign, asking its reviewers over HTTP (docs/any-agent.md)."""
