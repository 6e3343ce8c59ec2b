"""The gateway's configuration: what it reads, what it refuses (saying where), and which calls ask."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from mcp_types import Tool

from agents_runtime.previews import preview_problems
from approvals.mcp.config import ConfigError, ToolPolicy, UpstreamConfig, load, parse
from approvals.mcp.gateway import Caller, _route, needs_approval
from approvals.mcp.previews import PreviewTemplate, fill
from approvals.mcp.upstream import Upstream

ROOT = Path(__file__).resolve().parents[3]


def config(**upstream: Any) -> dict[str, Any]:
    return {"gateway": {"agent": "g"}, "upstreams": {"files": {"command": ["python", "x.py"], **upstream}}}


def test_the_demo_configuration_reads() -> None:
    demo = load(ROOT / "demo" / "mcp_gateway.toml")
    assert (demo.agent, demo.deadline_seconds, demo.deadline_default) == ("mcp-demo", 3600, "decline")
    notes = demo.upstreams[0]
    assert (notes.name, notes.command, notes.default) == ("notes", ("python", "demo/mcp_upstream.py"), "pass")
    assert notes.policy("list_notes").mode == "pass"
    assert notes.policy("delete_note").rules.confirm is True
    add = notes.policy("add_note")
    assert add.when is not None
    assert needs_approval(add, {"title": "ops-deploy", "text": ""})
    assert not needs_approval(add, {"title": "lunch", "text": ""})
    # Its two approval tools say what they would do.
    assert add.preview is not None and notes.policy("delete_note").preview is not None
    assert add.preview.render({"title": "ops-deploy", "text": "at 5"}) == {
        "sentence": "Keeps the note ops-deploy (replacing one of that title)",
        "changes": [
            {"label": "Text of ops-deploy", "before": "(any earlier note's, replaced)", "after": "at 5"}
        ],
    }
    assert notes.policy("delete_note").preview.render({"title": "ops-x"}) == {
        "sentence": "Forgets the note ops-x and its text",
        "items": ["ops-x"],
    }


def test_json_and_a_tool_without_an_entry_asks() -> None:
    parsed = parse(config(tools={"echo": {"mode": "pass"}}))
    files = parsed.upstreams[0]
    assert files.policy("echo").mode == "pass" and files.policy("anything").mode == "approve"
    assert parsed.name == "g" and parsed.progress_seconds == 10.0


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"upstreams": {}}, "at least one upstream"),
        ({"gateway": {"agent": "Not An Id"}, "upstreams": {"a": {"command": ["x"]}}}, "[gateway] agent"),
        ({"gateway": {"colour": "red"}, "upstreams": {"a": {"command": ["x"]}}}, "unknown keys colour"),
        (config(url="http://x/mcp"), "either command"),
        ({"upstreams": {"a": {}}}, "either command"),
        ({"upstreams": {"a": {"url": "ftp://x"}}}, "http:// or https://"),
        ({"upstreams": {"a b": {"command": ["x"]}}}, "a name of 1 to 32"),
        (config(default="maybe"), "default: one of pass, approve, hide"),
        (config(tools={"rm": {"mode": "sometimes"}}), "tools.rm mode"),
        (config(tools={"rm": {"mode": "pass", "when": "true"}}), 'for mode = "approve" only'),
        (config(tools={"rm": {"when": "path =="}}), "tools.rm when: The condition is not a valid expression"),
        (config(tools={"rm": {"rules": {"approvals": "two"}}}), "tools.rm rules"),
        ({"gateway": {"deadline_seconds": -1}, "upstreams": {"a": {"command": ["x"]}}}, "deadline_seconds"),
        ({"gateway": {"progress_seconds": 0}, "upstreams": {"a": {"command": ["x"]}}}, "progress_seconds"),
        (
            config(tools={"rm": {"preview": {"sentence": "Removes ${path.__class__}"}}}),
            "tools.rm preview: sentence: ${path.__class__} is not a placeholder",
        ),
        (
            config(tools={"rm": {"preview": {"items": ["${path"]}}}),
            "tools.rm preview: items[0]: a '${' without its '}'",
        ),
        (
            config(tools={"rm": {"preview": {"sentence": "x", "colour": "red"}}}),
            "tools.rm preview: unknown keys",
        ),
        (config(tools={"rm": {"preview": {"changes": [{"label": "a"}]}}}), "tools.rm preview: changes[0]"),
        (config(tools={"rm": {"preview": {"items": "${path}"}}}), "tools.rm preview: items: a list"),
        (config(tools={"rm": {"preview": {"sentence": 3}}}), "tools.rm preview: sentence: text"),
        (config(tools={"rm": {"preview": {}}}), "tools.rm preview: empty"),
        (config(tools={"rm": {"preview": "Removes ${path}"}}), "tools.rm preview: a table"),
        (
            config(tools={"rm": {"mode": "pass", "preview": {"sentence": "x"}}}),
            'preview: for mode = "approve" only',
        ),
    ],
)
def test_a_configuration_that_cannot_be_used_says_where(data: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse(data)
    assert says in str(refused.value)


def test_a_file_that_is_not_toml_or_is_missing(tmp_path: Path) -> None:
    broken = tmp_path / "gateway.toml"
    broken.write_text("[gateway\n")
    with pytest.raises(ConfigError, match="not TOML"):
        load(broken)
    with pytest.raises(ConfigError, match="No such file"):
        load(tmp_path / "missing.toml")
    with pytest.raises(CommandError, match="not TOML"):
        call_command("mcp_gateway", "--config", str(broken))


TOOL = Tool(
    name="rm",
    description="Remove a file.",
    input_schema={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def test_conditions_are_checked_against_the_tools_schema_and_ask_when_they_cannot_say() -> None:
    policy = parse(config(tools={"rm": {"when": 'path.startsWith("/etc/")'}})).upstreams[0].policy("rm")
    route = _route(Upstream(UpstreamConfig(name="files", command=("x",), tools={"rm": policy})), TOOL)
    assert route is not None and route.listed.name == "files.rm" and route.args_schema == TOOL.input_schema
    assert needs_approval(policy, {"path": "/etc/passwd"}) and not needs_approval(policy, {"path": "/tmp/a"})
    # A missing argument or a wrong type: the condition cannot say no, so the call asks.
    assert needs_approval(policy, {}) and needs_approval(policy, {"path": 3})

    naming = parse(config(tools={"rm": {"when": "size > 10"}})).upstreams[0].policy("rm")
    with pytest.raises(ConfigError, match=r"\[upstreams.files\] tools.rm when: .*size"):
        _route(Upstream(UpstreamConfig(name="files", command=("x",), tools={"rm": naming})), TOOL)


def test_hidden_tools_are_not_routed_and_pass_through_ones_never_ask() -> None:
    hidden = UpstreamConfig(name="files", command=("x",), tools={"rm": ToolPolicy(mode="hide")})
    assert _route(Upstream(hidden), TOOL) is None
    assert not needs_approval(ToolPolicy(mode="pass"), {"path": "/etc/passwd"})


def test_the_idempotency_key_is_the_session_and_the_call_bounded() -> None:
    assert Caller(session="s", call_id="7").idempotency_key() == "mcp:s:7"
    assert Caller(session=None, call_id="7").idempotency_key() is None
    long = Caller(session="s" * 300, call_id="7").idempotency_key()
    assert long is not None and long.startswith("mcp:sha256:") and len(long) <= 255


def test_a_preview_is_filled_in_from_the_arguments_and_reaches_nothing_else() -> None:
    template = PreviewTemplate.parse(
        {
            "sentence": "Removes ${path} for $$5 ($40), {0.__class__} {path}",
            "changes": [{"label": "Owner", "before": "${owner.name}", "after": "${new_owner}"}],
            "items": ["${paths}", "${path}"],
        }
    )
    args = {"path": "/etc/x", "owner": {"name": "root"}, "paths": ["/a", 2], "new_owner": None}
    assert template.render(args) == {
        # ``str.format``'s fields and a lone "$" are text as written; "$$" is a dollar sign.
        "sentence": "Removes /etc/x for $5 ($40), {0.__class__} {path}",
        "changes": [{"label": "Owner", "before": "root", "after": "null"}],
        # A placeholder naming a list is one item per element.
        "items": ["/a", "2", "/etc/x"],
    }
    # Arguments the call lacks are marked, and the call still has its preview.
    assert template.render({}) == {
        "sentence": "Removes ⟨path missing⟩ for $5 ($40), {0.__class__} {path}",
        "changes": [{"label": "Owner", "before": "⟨owner.name missing⟩", "after": "⟨new_owner missing⟩"}],
        "items": ["⟨paths missing⟩", "⟨path missing⟩"],
    }
    # Even past the configuration's check, a path only looks keys up: no attribute is reached.
    assert fill("${path.__class__} ${path.upper} ${path.0}", {"path": "/x"}) == (
        "⟨path.__class__ missing⟩ ⟨path.upper missing⟩ ⟨path.0 missing⟩"
    )


def test_a_filled_in_preview_is_cut_to_the_bounds_of_any_external_agents() -> None:
    template = PreviewTemplate.parse({"sentence": "Writes ${text}", "items": ["${paths}"]})
    filled = template.render({"text": "x\x00" * 400, "paths": [f"/{i}" for i in range(80)]})
    assert filled is not None
    assert len(filled["sentence"]) == 500 and filled["sentence"].endswith("…")
    assert "\x00" not in filled["sentence"]
    assert len(filled["items"]) == 50
    assert preview_problems(filled) == []  # what the request takes from any external agent
