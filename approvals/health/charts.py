"""Charts as inline SVG, drawn on the server: data in, markup out (pure functions).

No ``style`` attribute and no ``<style>`` element (the CSP allows neither): every colour and stroke
comes from classes in ``static/countersign/app.css`` (``.chart-*``). Every text is escaped (agent
and tool names are configuration or model output). Each chart says what it shows in its
``<title>`` / ``<desc>``; the page puts the table it is drawn from beside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH = 720
HEIGHT = 220
#: Room for the axes' labels: left, right, top, bottom.
PAD = (44, 12, 12, 28)
BAR_HEIGHT = 22


@dataclass(frozen=True)
class Line:
    name: str
    #: ``chart-line-<css>``: its colour (app.css).
    css: str
    values: Sequence[float]


def _attrs(attrs: dict[str, object]) -> str:
    return "".join(f' {name}="{escape(str(value))}"' for name, value in attrs.items())


def element(tag: str, attrs: dict[str, object], *children: str) -> str:
    """One SVG element; ``children`` are markup already built by this module (text: ``text``)."""
    if "style" in attrs:
        raise ValueError("no style attributes: the CSP refuses them (use a class)")
    inner = "".join(children)
    return f"<{tag}{_attrs(attrs)}>{inner}</{tag}>" if inner or tag == "text" else f"<{tag}{_attrs(attrs)}/>"


def text(value: object) -> str:
    return str(escape(str(value)))


def nice_ceiling(value: float) -> int:
    """The smallest of 1, 2, 5 x 10^k at or above ``value`` (at least 1): the axis' top."""
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return int(step * power)
    return int(10 * power)  # pragma: no cover (the loop always returns)


def _frame(chart_id: str, title: str, description: str, width: int, height: int, *body: str) -> SafeString:
    svg = element(
        "svg",
        {
            "class": "chart",
            "viewBox": f"0 0 {width} {height}",
            "role": "img",
            "aria-labelledby": f"{chart_id}-title {chart_id}-desc",
            "preserveAspectRatio": "xMidYMid meet",
            "xmlns": "http://www.w3.org/2000/svg",
        },
        element("title", {"id": f"{chart_id}-title"}, text(title)),
        element("desc", {"id": f"{chart_id}-desc"}, text(description)),
        *body,
    )
    # Safe: every attribute and text above went through escape().
    return mark_safe(svg)


def line_chart(
    chart_id: str,
    title: str,
    labels: Sequence[str],
    lines: Sequence[Line],
    *,
    every: int = 1,
    description: str = "",
) -> SafeString:
    """Lines over ``labels`` (one point per label), x labels at every ``every``-th point."""
    left, right, top, bottom = PAD
    plot_w, plot_h = WIDTH - left - right, HEIGHT - top - bottom
    peak = nice_ceiling(max((v for line in lines for v in line.values), default=0))
    n = max(len(labels), 1)
    step = plot_w / max(n - 1, 1)

    def x(i: int) -> float:
        return round(left + i * step, 1)

    def y(v: float) -> float:
        return round(top + plot_h - (v / peak) * plot_h, 1)

    parts = []
    for tick in (0, peak / 2, peak):
        parts.append(
            element(
                "line", {"class": "chart-grid", "x1": left, "x2": WIDTH - right, "y1": y(tick), "y2": y(tick)}
            )
        )
        label = f"{tick:g}"
        parts.append(
            element(
                "text",
                {"class": "chart-axis", "x": left - 6, "y": y(tick) + 4, "text-anchor": "end"},
                text(label),
            )
        )
    for i, label in enumerate(labels):
        if i % every == 0:
            parts.append(
                element(
                    "text",
                    {"class": "chart-axis", "x": x(i), "y": HEIGHT - 8, "text-anchor": "middle"},
                    text(label),
                )
            )
    for line in lines:
        points = " ".join(f"{x(i)},{y(v)}" for i, v in enumerate(line.values))
        parts.append(element("polyline", {"class": f"chart-line chart-line-{line.css}", "points": points}))
    legend_x = left + 8
    for line in lines:
        parts.append(
            element(
                "rect",
                {
                    "class": f"chart-key chart-line-{line.css}",
                    "x": legend_x,
                    "y": top + 2,
                    "width": 10,
                    "height": 10,
                },
            )
        )
        parts.append(
            element("text", {"class": "chart-legend", "x": legend_x + 14, "y": top + 11}, text(line.name))
        )
        legend_x += 14 + 8 * len(line.name) + 16
    return _frame(chart_id, title, description, WIDTH, HEIGHT, *parts)


def bar_chart(
    chart_id: str, title: str, bars: Sequence[tuple[str, float]], *, description: str = ""
) -> SafeString:
    """Horizontal bars, one per ``(label, value)``, the value written at the end of each."""
    label_w = 220
    height = max(1, len(bars)) * (BAR_HEIGHT + 6) + 8
    peak = max((v for _, v in bars), default=0) or 1
    plot_w = WIDTH - label_w - 60
    parts = []
    for i, (label, value) in enumerate(bars):
        top = 4 + i * (BAR_HEIGHT + 6)
        w = round(plot_w * value / peak, 1)
        parts.append(
            element(
                "text",
                {"class": "chart-axis", "x": label_w - 8, "y": top + 15, "text-anchor": "end"},
                text(label),
            )
        )
        parts.append(
            element(
                "rect",
                {"class": "chart-bar", "x": label_w, "y": top, "width": max(w, 1), "height": BAR_HEIGHT},
            )
        )
        parts.append(
            element(
                "text",
                {"class": "chart-value", "x": label_w + max(w, 1) + 6, "y": top + 15},
                text(f"{value:g}"),
            )
        )
    return _frame(chart_id, title, description, WIDTH, height, *parts)
