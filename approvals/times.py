"""One time format everywhere: the viewer's time zone, UTC on hover, relative times that tick.

Pages show a moment as ``<time datetime="<UTC ISO>" title="UTC ...">local text</time>`` (the
``timestamp`` template tag), in the zone ``middleware.viewer_time_zone`` activated for the request:
the one the viewer chose in the profile menu, else the one their browser reported
(``static/countersign/time.js`` keeps it in a cookie), else UTC. A display preference of this
browser, so cookies, not the session: read without a database query. ``relative=True`` shows "just now",
"3 min", "2 h 5 min" instead, which ``time.js`` keeps ticking; the title then gives the local and
the UTC time.
"""

from __future__ import annotations

import functools
import urllib.parse
import zoneinfo
from datetime import UTC, datetime

from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

#: The cookie ``time.js`` writes with the browser's zone (an IANA name).
BROWSER_ZONE_COOKIE = "countersign_tz"
#: The cookie of the zone the viewer chose in the profile menu (absent: automatic).
CHOSEN_ZONE_COOKIE = "countersign_tz_chosen"


@functools.cache
def zone_names() -> frozenset[str]:
    """The IANA zone names this machine knows (the only names accepted from a cookie or a form)."""
    return frozenset(zoneinfo.available_timezones()) | {"UTC"}


def zone(name: str | None) -> zoneinfo.ZoneInfo | None:
    """The zone called ``name``, or None for a name that is not one (never a path or anything else).

    time.js writes the browser's zone URI-encoded (``America%2FNew_York``); Django does not decode
    cookie values.
    """
    name = urllib.parse.unquote(name) if name else name
    if not name or name not in zone_names():
        return None
    return _zone(name)


@functools.cache
def _zone(name: str) -> zoneinfo.ZoneInfo:
    return zoneinfo.ZoneInfo(name)


def _text(moment: datetime) -> str:
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d} "
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
    )


def local_text(moment: datetime) -> str:
    """``2026-12-01 11:44:28 EST``: in the request's zone, with its abbreviation."""
    local = timezone.localtime(moment)
    return f"{_text(local)} {local.tzname() or ''}".rstrip()


def utc_text(moment: datetime) -> str:
    return f"UTC {_text(moment.astimezone(UTC))}"


def relative_text(moment: datetime, now: datetime) -> str:
    """How long ago (or until): "just now", "3 min", "2 h 5 min", "3 d 4 h", "12 d". Mirrored in time.js."""
    seconds = abs((now - moment).total_seconds())
    if seconds < 45:
        return "just now"
    minutes = max(1, int(seconds // 60))
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours and days < 7 else f"{days} d"


def time_element(
    moment: datetime | None, *, relative: bool = False, now: datetime | None = None
) -> SafeString:
    """The ``<time>`` element of ``moment`` (empty for None); see the module's docstring."""
    if moment is None:
        return mark_safe("")
    if timezone.is_naive(moment):
        moment = moment.replace(tzinfo=UTC)
    iso = moment.astimezone(UTC).isoformat()
    if relative:
        text = relative_text(moment, now or timezone.now())
        title = f"{local_text(moment)} · {utc_text(moment)}"
        extra = " data-relative"
    else:
        text, title, extra = local_text(moment), utc_text(moment), ""
    return mark_safe(f'<time datetime="{iso}" title="{escape(title)}"{extra}>{escape(text)}</time>')


def chosen_zone_name(cookies: dict[str, str]) -> str:
    """The zone chosen in the profile menu ("" for automatic, or a name that is no zone)."""
    name = cookies.get(CHOSEN_ZONE_COOKIE, "")
    return name if zone(name) is not None else ""


def zone_label(name: str) -> str:
    """``America/New_York`` -> ``New York``: the short name the header shows."""
    return name.rsplit("/", 1)[-1].replace("_", " ")


@functools.lru_cache(maxsize=32)
def zone_options(chosen: str) -> SafeString:
    """The profile menu's ``<option>``s: automatic, then every zone; built once per choice (about
    600 zones: a loop in the template on every page would cost more than the rest of the header)."""
    options = [
        f'<option value=""{" selected" if not chosen else ""}>Automatic (this browser\'s zone)</option>'
    ]
    for name in sorted(zone_names()):
        selected = " selected" if name == chosen else ""
        # No value attribute: an option's value is its text (600 of them on every page's header).
        options.append(f"<option{selected}>{escape(name)}</option>")
    return mark_safe("".join(options))
