"""The dashboard views, by job: pages, decisions, audit (shared helpers in base)."""
