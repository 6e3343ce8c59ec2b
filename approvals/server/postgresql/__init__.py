"""Django's PostgreSQL backend with ``approvals.server.pool.ConnectionPool`` as its pool (``base``)."""
