"""The dashboard's URLs (part of the stable surface: see the dashboard spec); the ids in them are read
by the converters of ``approvals.ids``."""

from django.urls import path, register_converter

from approvals.ids import CallIdConverter, IdConverter
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
    path("account/api-tokens/<id:key_id>/revoke", tokens.api_token_revoke, name="api_token_revoke"),
    path("account/notifications/", notification_views.notification_settings, name="notifications"),
]
