"""What every dashboard view shares: the htmx request type, permission guards, partial rendering and
agent lookup.

Views are plain functions with a method guard each and thin bodies: reads come from
``approvals.queries``, changes go through ``approvals.services``. An htmx request gets the named
partial it swaps in; the same URL without htmx gets the whole page (decisions: a redirect back with a
message), so everything works without JavaScript. htmx 2 does not swap 4xx responses, so errors
meant to be shown in place are answered with 200 to htmx and with 400 otherwise. What the user may
see and do is resolved once per request (``access_of``) and handed to the services and templates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST
from django_htmx.middleware import HtmxDetails

from approvals import agents, ids, queries
from approvals.cards import call as call_views
from approvals.cards import run as cards
from approvals.forms.decisions import DeclineForm, EditedArgsForm, GrantForm
from approvals.forms.schema import ResumeForm
from approvals.policy import Access, AgentAccess
from approvals.services import DECIDE_PERMISSION


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def permission_required(permission: str, *, to: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Like Django's, but the 403 page says which permission is missing (and never redirects)."""

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            access_of(request).require(permission, to=to)
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def deciding(*, to: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A reviewer's action on calls (decide, claim, undo, extend, bulk): POST only, signed in, and
    holding the permission to decide (the 403 says what it was ``to`` do)."""

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        return require_POST(login_required(permission_required(DECIDE_PERMISSION, to=to)(view)))

    return decorator


def is_partial(request: HtmxHttpRequest) -> bool:
    """An htmx request that swaps a fragment (a history restore needs the whole page)."""
    return bool(request.htmx) and not request.htmx.history_restore_request


def render_page(
    request: HtmxHttpRequest,
    page: str,
    partial: str,
    context: dict[str, Any],
    *,
    status: int = 200,
) -> HttpResponse:
    template = f"{page}#{partial}" if is_partial(request) else page
    response = render(request, template, context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response


_ACCESS_ATTRIBUTE = "countersign_access"


def access_of(request: HttpRequest) -> Access:
    """The user's rights, resolved on first use and kept for the rest of the request."""
    access: Access | None = getattr(request, _ACCESS_ATTRIBUTE, None)
    if access is None or access.user is not request.user:
        access = Access.of(request.user)
        setattr(request, _ACCESS_ATTRIBUTE, access)
    return access


def visible_agent(request: HttpRequest, agent_id: str) -> AgentAccess:
    """The agent ``agent_id`` with the user's right to it: 404 when unknown, 403 when not theirs."""
    try:
        return access_of(request).for_agent(agent_id)
    except agents.UnknownAgent:
        raise Http404(f"No agent “{agent_id}” is registered.") from None


def next_url(request: HttpRequest, target: str, run_id: str) -> str:
    """Where a card's forms return without JavaScript: ``target`` if it is this site's, else the run."""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return reverse("approvals:run", args=[run_id])


# -- a call's card, shown again -------------------------------------------------------------------

#: One run card (the inbox and the run page include the same file).
RUN_CARD = "approvals/partials/run_card.html"


@dataclass
class CallCard:
    """The call's card, to show again with a form's errors or a notice (the run is unchanged)."""

    request: HtmxHttpRequest
    run_id: str
    tool_call_id: str
    agent_id: str
    _waiting: Any = field(default=None, init=False)

    @property
    def auto_id(self) -> str:
        return f"{ids.call_block_id(self.run_id, self.tool_call_id)}-%s"

    def waiting(self) -> queries.WaitingCall | None:
        """The call as it waits now (None: not waiting; the door says why)."""
        if self._waiting is None:
            access = access_of(self.request)
            self._waiting = queries.waiting_call(access, self.run_id, self.tool_call_id) or False
        return self._waiting or None

    def again(
        self, form: Any = None, *, notice: str = "", status: int | None = None, expanded: bool = False
    ) -> HttpResponse:
        """The card as the call waits now, with ``form``'s data and errors and ``notice`` on the call."""
        response = _card_again(self, form, notice, expanded)
        if status is not None and not is_partial(self.request):
            response.status_code = status
        return response


def _card_again(card: CallCard, form: Any, notice: str, expanded: bool) -> HttpResponse:
    request = card.request
    access = access_of(request)
    found = queries.run_seen(access, card.run_id)
    if found is None:
        raise Http404("This run is not waiting any more.")
    agent, run = found
    forms = {
        "resume_forms": ResumeForm,
        "decline_forms": DeclineForm,
        "edited_args_forms": EditedArgsForm,
        "grant_forms": GrantForm,
    }
    shown = {key: {card.tool_call_id: form} for key, kind in forms.items() if isinstance(form, kind)}
    if isinstance(form, ResumeForm) and form.prefix == call_views.ARGS_PREFIX:
        shown = {"args_forms": {card.tool_call_id: form}}
    context = {
        "card": cards.run_card(
            run,
            agent=agent,
            agent_name=agent.name or agent.id,
            next_url=next_url(request, request.POST.get("next", ""), card.run_id),
            notices={card.tool_call_id: notice} if notice else None,
            claims=queries.call_claims([card.run_id]),
            held={key: h.username for key, h in queries.call_holds([card.run_id]).items()},
            expanded=expanded,
            access=access,
            **shown,  # type: ignore[arg-type]
        ),
        "can_decide": access.for_agent(agent.id).can_decide,
    }
    if is_partial(request):
        response = render(request, RUN_CARD, context)
        patch_vary_headers(response, ["HX-Request"])
        return response
    # Without JavaScript: the run page with the errors next to the fields.
    context |= {
        "run_id": card.run_id,
        "agent": agent,
        "decisions": list(queries.run_decisions(card.run_id)),
        "conversation": cards.conversation(queries.run_conversation(agent, card.run_id)),
    }
    return render(request, "approvals/run.html", context, status=400)
