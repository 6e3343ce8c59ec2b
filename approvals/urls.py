"""The dashboard's URLs (part of the stable surface: see the dashboard spec), and the converters of
the ids in them.

Path converters: junk is a 404, any tool call id round-trips.

- ``run_id`` / ``agent_id``: any text without ``/`` or NUL, at most 255 characters (what the store
  keeps). ``%00`` never reaches the database (PostgreSQL refuses NUL): the URL does not match.
- ``call_id``: a tool call id is model output and may hold anything printable, ``/`` and ``..``
  included. ``to_url`` percent-encodes ``/``, ``%``, ``?``, ``#`` and the like (and an id made only
  of dots), so the id is one path segment that no browser rewrites; Django quotes that once more, the
  server decodes it once, and ``to_python`` decodes the rest. Ids of letters, digits, ``_-.:@~``
  keep their URL as it was.
"""

from urllib.parse import quote, unquote

from django.urls import path, register_converter

from approvals.views import (
    audit,
    batches,
    claims,
    deadlines,
    decisions,
    grants,
    pages,
    profile,
    rules,
    suggestions,
    tokens,
)
from approvals.views import health as health_views
from approvals.views import notifications as notification_views

#: Characters a call id keeps as they are in its URL (RFC 3986 sub-delims, ``:``, ``@``; no ``%``).
_KEPT = "!$&'()*+,;=:@~"


class IdConverter:
    regex = "[^/\x00]{1,255}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class CallIdConverter:
    regex = "[^/\x00]+"

    def to_python(self, value: str) -> str:
        decoded = unquote(value)
        if "\x00" in decoded:
            raise ValueError("NUL in a tool call id")
        return decoded

    def to_url(self, value: str) -> str:
        # (A lone surrogate, which no store keeps, would otherwise fail the page: it finds nothing.)
        encoded = quote(value, safe=_KEPT, errors="surrogatepass")
        if encoded.strip(".") == "":
            # "." and ".." are path segments a browser would resolve away.
            encoded = encoded.replace(".", "%2E")
        return encoded


register_converter(IdConverter, "id")
register_converter(CallIdConverter, "call_id")

app_name = "approvals"

urlpatterns = [
    # The reviewer's queue for those who decide more than one agent's calls, else the overview.
    path("", pages.home, name="home"),
    path("queue/", pages.queue, name="queue"),
    path("agents/", pages.overview, name="overview"),
    path("agents/<id:agent_id>/", pages.inbox, name="inbox"),
    path("agents/<id:agent_id>/batches/new", batches.batch_new, name="batch_new"),
    path("agents/<id:agent_id>/follow", batches.agent_follow, name="follow"),
    path("batches/<int:batch_id>/", batches.batch_detail, name="batch"),
    path("batches/<int:batch_id>/start", batches.batch_start, name="batch_start"),
    path("runs/new/", pages.run_new, name="run_new"),
    path("runs/<id:run_id>/", pages.run_detail, name="run"),
    # Tool call ids are model output: ``call_id`` round-trips any of them (the converters above).
    path("runs/<id:run_id>/calls/<call_id:tool_call_id>/", pages.call_body, name="call"),
    path("runs/<id:run_id>/calls/<call_id:tool_call_id>/approve", decisions.call_approve, name="approve"),
    path("runs/<id:run_id>/calls/<call_id:tool_call_id>/decline", decisions.call_decline, name="decline"),
    path("runs/<id:run_id>/calls/<call_id:tool_call_id>/resume", decisions.call_resume, name="resume"),
    path(
        "runs/<id:run_id>/calls/<call_id:tool_call_id>/extend-deadline",
        deadlines.call_extend_deadline,
        name="extend_deadline",
    ),
    path("runs/<id:run_id>/calls/<call_id:tool_call_id>/claim", claims.call_claim, name="claim"),
    path("runs/<id:run_id>/calls/<call_id:tool_call_id>/undo", decisions.call_undo, name="undo"),
    path("grants/", grants.grants_page, name="grants"),
    path("grants/<int:grant_id>/revoke", grants.grant_revoke, name="grant_revoke"),
    path("grants/suggestions/accept", suggestions.suggestion_accept, name="suggestion_accept"),
    path("grants/suggestions/dismiss", suggestions.suggestion_dismiss, name="suggestion_dismiss"),
    path("rules/", rules.rules_page, name="rules"),
    path("rules/try", rules.rule_try, name="rule_try"),
    path("rules/<int:rule_id>/", rules.rule_edit, name="rule_edit"),
    path("rules/<int:rule_id>/delete", rules.rule_delete, name="rule_delete"),
    path("audit/", audit.audit_log, name="audit"),
    path("audit/export.csv", audit.audit_export, name="audit_export"),
    path("health/", health_views.queue_health, name="health"),
    path("profile/time-zone/", profile.time_zone_set, name="time_zone"),
    path("account/api-tokens/", tokens.api_tokens, name="api_tokens"),
    path("account/api-tokens/<str:key_id>/revoke", tokens.api_token_revoke, name="api_token_revoke"),
    path("account/notifications/", notification_views.notification_settings, name="notifications"),
]
