"""Tools: the ``tool`` decorator, what a tool says of itself, and the ``ToolContext`` a call gets."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, NoReturn, Unpack, cast, overload

import jsonschema
import pydantic

from .errors import InvalidResumeData, InvalidToolArgs
from .presentation import ApprovalRule, FieldHint, Money, approval_reason, money_fields, title_for
from .previews import PREVIEW_TIMEOUT, PreviewSpec
from .schema_check import TooCostlyToCheck, schema_problems, validation_errors
from .store import Deadline, DeadlineOptions, deadline_from
from .untrusted import to_jsonable

#: ``requires_approval``: a bool, a callable of the arguments (True, or a reason string, asks for
#: approval), or an ``ApprovalRule`` that says why.
ApprovalSpec = bool | Callable[[dict[str, Any]], Any] | ApprovalRule
#: A call's title: a template such as ``"Refund {amount_cents|money} · {order_id}"`` or a callable.
TitleSpec = str | Callable[[dict[str, Any]], str] | None
SchemaSpec = type[pydantic.BaseModel] | Mapping[str, Any] | None

__all__ = ["Tool", "ToolContext", "ToolSuspended", "tool"]


class ToolSuspended(BaseException):
    """Raised by ``ToolContext.suspend``.

    A ``BaseException`` so that a tool's own ``except Exception`` cannot swallow it.
    """

    def __init__(self, payload: Any) -> None:
        super().__init__("tool suspended")
        self.payload = payload


class ToolContext:
    """What a tool knows about the call it serves. Tools get it by annotating a parameter with it.

    ``tool_call_id`` is the call's idempotency key: a tool with side effects should make them
    idempotent on it (e.g. pass it as the payment provider's idempotency key). A process that dies
    while the tool runs leaves the call offered again; if a reviewer confirms running it again, the
    tool gets the same ``tool_call_id``.
    """

    def __init__(
        self,
        *,
        run_id: str,
        tool_call_id: str,
        agent_id: str,
        thread_id: str | None,
        resource_id: str | None,
        resume_data: Any = None,
    ) -> None:
        self.run_id = run_id
        self.tool_call_id = tool_call_id
        self.agent_id = agent_id
        self.thread_id = thread_id
        self.resource_id = resource_id
        #: None on the first execution; once resumed, the validated resume data.
        self.resume_data = resume_data

    def suspend(self, payload: Any = None) -> NoReturn:
        """Park this tool call until a human answers with resume data. Never returns."""
        raise ToolSuspended(payload)

    def __repr__(self) -> str:
        return f"ToolContext(run_id={self.run_id!r}, tool_call_id={self.tool_call_id!r})"


def _json_schema(spec: SchemaSpec) -> dict[str, Any] | None:
    if spec is None:
        return None
    if isinstance(spec, type) and issubclass(spec, pydantic.BaseModel):
        return spec.model_json_schema()
    return dict(spec)


def _validate(spec: SchemaSpec, data: Any, what: str) -> Any:
    """Validate ``data`` against a pydantic model or a JSON Schema dict.

    Returns the model instance (pydantic) or the data itself (dict schema / no schema).
    Raises ``InvalidResumeData`` with one ``{"loc", "msg"}`` per problem.
    """
    if spec is None:
        return data
    if isinstance(spec, type) and issubclass(spec, pydantic.BaseModel):
        try:
            return spec.model_validate(data)
        except pydantic.ValidationError as exc:
            errors = [{"loc": tuple(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
            raise InvalidResumeData(f"Invalid {what}: {exc.error_count()} error(s)", errors=errors) from None
    unusable = schema_problems(spec)
    if unusable:
        # Only a schema stored by an older version, or set past ``tool()``, gets here.
        message = f"The tool's schema is invalid ({'; '.join(unusable)}): its {what} cannot be checked"
        raise InvalidResumeData(message, errors=[{"loc": (), "msg": message}])
    try:
        problems = validation_errors(spec, data)
    except TooCostlyToCheck as exc:
        message = f"The tool's schema cannot check this {what}: {exc}"
        raise InvalidResumeData(message, errors=[{"loc": (), "msg": message}]) from None
    except (RecursionError, ValueError, TypeError, LookupError, jsonschema.SchemaError) as exc:
        message = f"The tool's schema cannot check this {what} ({type(exc).__name__})"
        raise InvalidResumeData(message, errors=[{"loc": (), "msg": message}]) from None
    if problems:
        errors = [{"loc": tuple(p.absolute_path), "msg": p.message} for p in problems]
        raise InvalidResumeData(f"Invalid {what}: {len(errors)} error(s)", errors=errors)
    return data


def _is_tool_context(annotation: Any) -> bool:
    if annotation is ToolContext:
        return True
    # Under ``from __future__ import annotations`` the hint is a string; never evaluate it (it may
    # name something imported only for type checking): its last dotted name is enough.
    return isinstance(annotation, str) and annotation.strip().strip("'\"").split(".")[-1] == "ToolContext"


@dataclass(frozen=True)
class Tool:
    """A function the model may call, with its human-in-the-loop rules. Build it with ``tool``."""

    function: Callable[..., Any]
    name: str
    description: str | None
    requires_approval: ApprovalSpec
    suspend_schema: SchemaSpec
    resume_schema: SchemaSpec
    #: The name of the ``ToolContext`` parameter, if the function takes one.
    context_param: str | None
    #: The model-supplied parameters, with resolved annotations.
    parameters: tuple[inspect.Parameter, ...]
    #: What a reviewer sees of a call (``presentation``): its title, how fields read (money), the
    #: argument values that make a call risky, the fields of this tool's results that later cards
    #: show, and whether approving needs a second, explicit confirmation.
    title: TitleSpec = None
    fields: Mapping[str, FieldHint] = dataclass_field(default_factory=dict)
    risky: Mapping[str, tuple[Any, ...]] = dataclass_field(default_factory=dict)
    key_results: tuple[str, ...] = ()
    confirm: bool = False
    #: How long its calls may wait for a reviewer and what happens then (None: forever).
    deadline: Deadline | None = None
    #: Distinct reviewers who must approve a call before it runs (``policy``), and whether the
    #: person who started the run is refused as one of them.
    approvals: int = 1
    separate_duties: bool = False
    #: Whether reviewers may let its calls through ahead of time with a standing grant
    #: (``grants``); False for what must always be looked at (a production deploy).
    grantable: bool = True
    #: What a call would do, told before anyone decides (``previews``): run when a call parks,
    #: within ``preview_timeout`` seconds.
    preview: PreviewSpec | None = None
    preview_timeout: float = PREVIEW_TIMEOUT
    #: Run the preview again after an approval, before the tool runs: a call whose preview changed
    #: (or could not be made) does not run but waits again (``_loop.rechecked``).
    recheck: bool = False
    #: The tool's version: a decision is bound to it (``policy.fingerprint``), so a card shown before
    #: an upgrade decides nothing after it.
    version: str = ""

    def __post_init__(self) -> None:
        if type(self.approvals) is not int or self.approvals < 1:
            raise ValueError(f"Tool {self.name!r}: approvals must be an int >= 1")
        if (self.approvals > 1 or self.separate_duties) and self.requires_approval is False:
            raise ValueError(f"Tool {self.name!r}: approvals / separate_duties need requires_approval")
        if self.recheck and (self.preview is None or self.requires_approval is False):
            raise ValueError(f"Tool {self.name!r}: recheck needs a preview and requires_approval")
        for field_name in ("suspend_schema", "resume_schema"):
            spec = getattr(self, field_name)
            if spec is None or (isinstance(spec, type) and issubclass(spec, pydantic.BaseModel)):
                continue
            unusable = schema_problems(spec)
            if unusable:
                raise ValueError(
                    f"Tool {self.name!r}: {field_name} is not a valid JSON Schema: {'; '.join(unusable)}"
                )

    @property
    def takes_grants(self) -> bool:
        """Whether a grant can approve its calls: it must allow it and need one approval only (a
        grant is one person's approval; ``approvals=2`` asks for two at the time of the call)."""
        return self.grantable and self.approvals == 1

    def for_call(self, args_schema: Any = None, title: Any = None) -> Tool:
        """This tool as it applies to one call that brought its own argument schema and title (an
        external agent's request: ``agents_runtime.external``); a tool defined here has its own."""
        return self

    def approval(self, args: dict[str, Any]) -> tuple[bool, str]:
        """Whether a call with ``args`` needs approval, and why as the rule explains it ("" if not)."""
        return approval_reason(self.requires_approval, args)

    def title_for(self, args: Mapping[str, Any] | None) -> str:
        """The call's title for a reviewer (escaped by whoever shows it: the values are model output)."""
        return title_for(self.title, self.name, args, self.money)

    def risky_values(self, args: Mapping[str, Any] | None) -> dict[str, Any]:
        """The arguments of a call whose values the tool marks risky (e.g. ``environment: production``)."""
        if not isinstance(args, Mapping):
            return {}
        return {
            name: args[name] for name, values in self.risky.items() if name in args and args[name] in values
        }

    @functools.cached_property
    def money(self) -> dict[str, Money]:
        """Its money fields: ``Money`` hints and ``x-money`` annotations of its parameters' schema
        (``presentation.money_fields``), by name."""
        return money_fields(self.parameters_json_schema, self.fields)

    @functools.cached_property
    def parameters_json_schema(self) -> dict[str, Any]:
        """The JSON Schema of the model-supplied arguments (what edited arguments are checked against)."""
        schema: dict[str, Any] = self._args_adapter.json_schema()
        return schema

    @property
    def suspend_json_schema(self) -> dict[str, Any] | None:
        return _json_schema(self.suspend_schema)

    @property
    def resume_json_schema(self) -> dict[str, Any] | None:
        return _json_schema(self.resume_schema)

    def validate_resume_data(self, data: Any) -> Any:
        return _validate(self.resume_schema, data, "resume data")

    def validate_suspend_payload(self, payload: Any) -> Any:
        return _validate(self.suspend_schema, payload, "suspend payload")

    def args_with_defaults(self, args: Mapping[str, Any] | None) -> dict[str, Any]:
        """The model's arguments as the tool receives them (JSON form): converted by its parameters'
        types where they validate (``"666"`` for an ``int`` is 666, ``"true"`` for a ``bool`` is
        true), with the defaults of those left out. What risky values and the conditions of grants
        and routing rules are checked against: the model's own text would step round them. Arguments
        the tool would refuse are taken as they are (the tool fails on them before doing anything)."""
        given = dict(args or {})
        try:
            full: dict[str, Any] = to_jsonable(self._args_adapter.validate_python(given))
        except pydantic.ValidationError:
            full = given
        for param in self.parameters:
            if param.name not in full and param.default is not inspect.Parameter.empty:
                full[param.name] = to_jsonable(param.default)
        return full

    def validate_args(self, args: Any) -> dict[str, Any]:
        """Arguments a reviewer edited, checked as the tool's own parameters; their JSON form.

        Raises ``InvalidToolArgs`` (one ``{"loc", "msg"}`` per problem) for anything the tool could
        not be called with: not an object, unknown or missing parameters, wrong types.
        """
        if not isinstance(args, dict):
            raise InvalidToolArgs(
                f"Edited arguments of {self.name!r} must be an object",
                errors=[{"loc": (), "msg": "expected an object of arguments"}],
            )
        try:
            validated = self._args_adapter.validate_python(args)
        except pydantic.ValidationError as exc:
            errors = [{"loc": tuple(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
            raise InvalidToolArgs(
                f"Invalid edited arguments of {self.name!r}: {exc.error_count()} error(s)", errors=errors
            ) from None
        jsonable: dict[str, Any] = to_jsonable(validated)
        return jsonable

    @functools.cached_property
    def _args_adapter(self) -> pydantic.TypeAdapter[Any]:
        # A TypedDict rather than a model: parameter names like "json" or "copy" would shadow a
        # model's attributes. Parameters with a default may be left out.
        fields = {
            p.name: p.annotation if p.default is inspect.Parameter.empty else typing.NotRequired[p.annotation]
            for p in self.parameters
        }
        make_typed_dict: Any = typing.TypedDict
        arguments: Any = make_typed_dict(f"{self.name}_arguments", fields)
        arguments.__pydantic_config__ = pydantic.ConfigDict(extra="forbid")
        return pydantic.TypeAdapter(arguments)


def _annotated_hints(parameters: tuple[inspect.Parameter, ...]) -> dict[str, FieldHint]:
    """Field hints given as ``Annotated`` metadata of a parameter (``Annotated[int, Money(cents=True)]``)."""
    return {
        param.name: meta
        for param in parameters
        for meta in getattr(param.annotation, "__metadata__", ())
        if isinstance(meta, Money)
    }


@dataclass(frozen=True)
class _Presentation:
    title: TitleSpec = None
    preview: PreviewSpec | None = None
    preview_timeout: float = PREVIEW_TIMEOUT
    version: str = ""
    fields: Mapping[str, FieldHint] | None = None
    risky: Mapping[str, Any] | None = None
    key_results: tuple[str, ...] | list[str] = ()
    confirm: bool = False
    recheck: bool = False


def _build(
    fn: Callable[..., Any],
    *,
    name: str | None,
    requires_approval: ApprovalSpec,
    suspend_schema: SchemaSpec,
    resume_schema: SchemaSpec,
    presentation: _Presentation = _Presentation(),
    deadline: Deadline | None = None,
    approvals: int = 1,
    separate_duties: bool = False,
    grantable: bool = True,
) -> Tool:
    if not callable(fn):
        raise TypeError("tool() needs a function")
    signature = inspect.signature(fn)
    context_param: str | None = None
    others: list[inspect.Parameter] = []
    for param in signature.parameters.values():
        if param.annotation is not inspect.Parameter.empty and _is_tool_context(param.annotation):
            if context_param is not None:
                raise TypeError(f"{fn.__qualname__} takes more than one ToolContext")
            context_param = param.name
        elif param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY):
            raise TypeError(f"{fn.__qualname__}: tool parameters must be passable by keyword")
        else:
            others.append(param)
    # Resolve the model-facing annotations only (the ToolContext one may not be resolvable).
    shim = cast(Any, lambda: None)
    shim.__annotations__ = {p.name: p.annotation for p in others if p.annotation is not p.empty}
    hints = typing.get_type_hints(shim, globalns=getattr(fn, "__globals__", {}), include_extras=True)
    parameters = tuple(p.replace(annotation=hints.get(p.name, Any)) for p in others)
    return Tool(
        function=fn,
        name=name or fn.__name__,
        description=inspect.getdoc(fn),
        requires_approval=requires_approval,
        suspend_schema=suspend_schema,
        resume_schema=resume_schema,
        context_param=context_param,
        parameters=parameters,
        title=presentation.title,
        fields={**_annotated_hints(parameters), **dict(presentation.fields or {})},
        risky={
            key: tuple(values) if isinstance(values, list | tuple | set | frozenset) else (values,)
            for key, values in (presentation.risky or {}).items()
        },
        key_results=tuple(presentation.key_results),
        confirm=presentation.confirm,
        deadline=deadline,
        approvals=approvals,
        separate_duties=separate_duties,
        grantable=grantable,
        preview=presentation.preview,
        preview_timeout=presentation.preview_timeout,
        recheck=presentation.recheck,
        version=presentation.version,
    )


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    requires_approval: ApprovalSpec = False,
    suspend_schema: SchemaSpec = None,
    resume_schema: SchemaSpec = None,
    title: TitleSpec = None,
    fields: Mapping[str, FieldHint] | None = None,
    risky: Mapping[str, Any] | None = None,
    key_results: tuple[str, ...] | list[str] = (),
    confirm: bool = False,
    approvals: int = 1,
    separate_duties: bool = False,
    grantable: bool = True,
    preview: PreviewSpec | None = None,
    preview_timeout: float = PREVIEW_TIMEOUT,
    recheck: bool = False,
    version: str = "",
    **deadline: Unpack[DeadlineOptions],
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    requires_approval: ApprovalSpec = False,
    suspend_schema: SchemaSpec = None,
    resume_schema: SchemaSpec = None,
    title: TitleSpec = None,
    fields: Mapping[str, FieldHint] | None = None,
    risky: Mapping[str, Any] | None = None,
    key_results: tuple[str, ...] | list[str] = (),
    confirm: bool = False,
    approvals: int = 1,
    separate_duties: bool = False,
    grantable: bool = True,
    preview: PreviewSpec | None = None,
    preview_timeout: float = PREVIEW_TIMEOUT,
    recheck: bool = False,
    version: str = "",
    **deadline: Unpack[DeadlineOptions],
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a function a tool.

    ``requires_approval`` is a bool, or a callable that gets the validated arguments as a dict and
    returns whether this call needs a human's approval (if it raises, approval is required; a string
    it returns asks for approval and says why), or an ``ApprovalRule(when, because=...)``.
    ``suspend_schema`` / ``resume_schema`` (pydantic models or JSON Schema dicts) describe what the
    tool passes to ``ToolContext.suspend()`` and the data it must be resumed with.

    For the reviewer (docs/agents.md): ``title`` (``"Refund {amount_cents|money} · {order_id}"`` or
    a callable of the arguments), ``fields`` (``{"amount_cents": Money(cents=True)}``), ``risky``
    (``{"environment": ["production"]}``: shown as a warning chip, and approving asks for
    confirmation), ``key_results`` (the fields of this tool's results shown on later cards of the
    run) and ``confirm=True`` (every approval asks for confirmation).

    A deadline (``store.Deadline``): ``expires_after``, ``on_expiry`` ("decline", "approve",
    "escalate"), ``escalate_to``, ``escalation_expires_after``. Who decides (README): ``approvals=2``
    (two distinct reviewers approve; any decline declines) and ``separate_duties=True`` (whoever
    started the run may not approve). ``grantable=False``: reviewers may not let its calls through
    ahead of time with a standing grant (``grants``); every call waits for a person.

    ``preview``: a function of the arguments (and the call's ``ToolContext``) saying what the call
    would do (``previews.Preview``), run when a call parks, within ``preview_timeout`` seconds.
    ``recheck=True``: the preview runs again after the approval, just before the tool would run; if
    it says something else now (or fails), the tool does not run and the call waits again, showing
    what was approved beside what it would do now.
    ``version``: a decision taken on a card shown before the tool's version changed is refused.
    """
    checked_deadline = deadline_from(deadline)

    def decorate(f: Callable[..., Any]) -> Tool:
        return _build(
            f,
            name=name,
            requires_approval=requires_approval,
            suspend_schema=suspend_schema,
            resume_schema=resume_schema,
            presentation=_Presentation(
                title,
                preview,
                preview_timeout,
                version,
                fields,
                risky,
                tuple(key_results),
                confirm,
                recheck,
            ),
            deadline=checked_deadline,
            approvals=approvals,
            separate_duties=separate_duties,
            grantable=grantable,
        )

    return decorate(fn) if fn is not None else decorate
