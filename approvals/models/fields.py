"""Model fields of our own."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper


class OrderedJSONField(models.JSONField):
    """JSON kept as written, its objects' keys in their order.

    For what people read, never queried into: a tool call's arguments as the model wrote them, a
    suspend payload, a resume schema whose properties are the form's fields in the tool author's
    order. PostgreSQL's ``jsonb`` (Django's ``JSONField``) sorts an object's keys by length; its
    ``json`` type keeps the text. Elsewhere (SQLite) JSON is stored as text anyway.
    """

    def db_type(self, connection: BaseDatabaseWrapper) -> str | None:
        if connection.vendor == "postgresql":
            return "json"
        return super().db_type(connection)

    def get_db_prep_value(self, value: Any, connection: BaseDatabaseWrapper, prepared: bool = False) -> Any:
        adapted = super().get_db_prep_value(value, connection, prepared)
        if connection.vendor == "postgresql":
            from psycopg.types.json import Json, Jsonb

            if isinstance(adapted, Jsonb):
                # Sent as jsonb, the server would sort the keys before storing it as json.
                return Json(adapted.obj, dumps=adapted.dumps)
        return adapted

    def from_db_value(self, value: Any, expression: Any, connection: BaseDatabaseWrapper) -> Any:
        if value is not None and not isinstance(value, str):
            return value  # psycopg decodes PostgreSQL's json type itself
        return super().from_db_value(value, expression, connection)
