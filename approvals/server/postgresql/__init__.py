"""Django's PostgreSQL backend with ``approvals.server.database.ConnectionPool`` as its pool (``base``)."""
