"""Conditions: CEL expressions over a tool call's arguments, bounded before they run.

A condition reads a call's arguments as its variables, e.g. ``amount_cents <= 10000 && environment ==
"staging"``. Grants use one to say which calls they let through; anything else that asks "do these
arguments satisfy this expression" (an MCP gateway) uses this module the same way.

Two programs read a condition. The maintained Rust ``cel`` package (common-expression-language)
compiles and evaluates it. cel-python's parser (a Lark LALR parser: a state machine, no recursion)
gives the tree this module measures; nothing of cel-python evaluates anything.

CEL has no loops, but its comprehensions nest: ten-item lists nested sixteen deep fit in 500
characters and would run for years, holding the GIL all along. So a condition is bounded twice:

* when compiled (``compile_condition``): its length, its bracket depth (counted on the raw text, before
  any parser sees it), its nesting, how deep and how many its comprehensions are, functions only from a
  list whose cost is known, and its cost estimated on arguments of any size (it may grow at most as the
  cube of their size) and on small ones (it must fit its budget);
* when evaluated (``Condition.evaluate``): an upper bound of this evaluation's cost, from the tree and
  the actual sizes of the arguments it reads (as cel-go's cost estimator does). Over
  ``EVALUATION_BUDGET``, it does not run.

Whatever runs, an error, a missing argument or a result other than ``true`` means "does not hold".
"""

from __future__ import annotations

import enum
import functools
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar

import cel
from celpy.celparser import CELParser
from lark import Token, Tree

from .errors import AgentsRuntimeError

#: Longest condition (a field a reviewer types into, not a program).
MAX_CONDITION_LENGTH = 500
#: Deepest nesting of brackets, counted on the raw text before anything parses it.
MAX_BRACKET_DEPTH = 8
#: Deepest nesting of the expression's operations (``a.b.c`` is three; ``&&`` chains count once).
MAX_NESTING = 24
#: Deepest nesting of comprehensions (all, exists, exists_one, map, filter) inside one another.
MAX_LOOP_DEPTH = 2
#: Most comprehensions in one condition.
MAX_LOOPS = 6
#: Fastest growth of the cost with the size of the arguments: at most their size cubed.
MAX_COST_DEGREE = 3
#: "Small arguments": strings of this many 16-byte pieces, lists and maps of this many items, nested.
#: A condition over its budget even on these is refused when it is compiled.
SMALL_ARGUMENTS = 10

#: Most cost units one evaluation may take. A unit is about one step of the Rust evaluator: one node
#: of the expression evaluated, one list element copied, 16 bytes of a string scanned. Chosen so the
#: costliest evaluation it admits stays far below what a reviewer would notice as a pause.
EVALUATION_BUDGET = 50_000

# What the steps cost, in units. Converting an argument's value into CEL is the slowest step there is
# (each value is a Python object to inspect); a comprehension's iteration costs more than a node; map
# and filter copy the list they have built so far at every iteration, so they are quadratic.
_STEP = 1
_ITERATION = 2
_ACCUMULATE = 2
_CONVERT = 25
_PARSE = 5
_BYTES_PER_UNIT = 16
#: Nesting of the arguments themselves beyond which they are not measured (nor handed to CEL).
_MAX_VALUE_DEPTH = 32


class InvalidCondition(AgentsRuntimeError, ValueError):
    """A condition that cannot be kept: not CEL, too costly to bound, or naming what the tool lacks.

    The message is for the person typing it: what is wrong and what to simplify."""


@dataclass(frozen=True)
class ConditionVerdict:
    """What a condition said about one set of arguments."""

    #: True only when the condition evaluated to exactly ``true``.
    holds: bool
    #: Why it could not be evaluated: it raised (which error, first line), it was over its evaluation
    #: budget, it gave a non-boolean, or an argument it names is missing. None when it evaluated.
    error: str | None = None


@dataclass(frozen=True)
class Condition:
    """A compiled condition (``compile_condition``): the argument names it reads and its evaluation."""

    source: str
    #: The top-level argument names it reads (not the variables its comprehensions bind).
    fields: frozenset[str]
    _tree: _Node = field(repr=False, compare=False)
    _program: cel.Program = field(repr=False, compare=False)
    #: Type names it reads (``int``): an argument of that name if the call has one, else the type.
    _type_names: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    def evaluate(self, variables: Mapping[str, Any] | None) -> ConditionVerdict:
        """Whether ``variables`` (the call's arguments) satisfy the condition. Never raises: an
        error, a missing argument, a non-boolean or an evaluation over its budget is a ``ConditionVerdict``
        that does not hold, with the reason in ``error``; over the budget, nothing runs."""
        try:
            return self._evaluate(variables)
        except Exception as exc:  # a check that raises would break the caller's run
            return ConditionVerdict(False, error=f"could not be checked: {_first_line(exc)}")

    def cost(self, variables: Mapping[str, Any] | None) -> int:
        """The most an evaluation on ``variables`` can cost, in the units of ``EVALUATION_BUDGET``
        (an over-approximation: the evaluation costs at most this). Arguments too large or too deep
        to measure cost more than the budget."""
        bound = self._bound(_given(self.fields | self._type_names, variables))
        return EVALUATION_BUDGET + 1 if isinstance(bound, str) else bound

    def _bound(self, given: Mapping[str, Any]) -> int | str:
        measured = _measure_all(given)
        if isinstance(measured, str):
            return measured
        shapes, converting = measured
        steps, result = _cost(self._tree, shapes)
        # The arguments converted in, the evaluation, and its value converted back out.
        return converting + steps + _CONVERT * _total(result)

    def _evaluate(self, variables: Mapping[str, Any] | None) -> ConditionVerdict:
        given = _given(self.fields | self._type_names, variables)
        missing = sorted(self.fields - given.keys())
        if missing:
            return ConditionVerdict(False, error=f"no argument {missing[0]!r}")
        bound = self._bound(given)
        if isinstance(bound, str):
            return ConditionVerdict(False, error=bound)
        if bound > EVALUATION_BUDGET:
            return ConditionVerdict(
                False,
                error=f"over its evaluation budget: up to {bound:,} units on these arguments, "
                f"at most {EVALUATION_BUDGET:,}",
            )
        try:
            value = self._program.execute(given)
        except Exception as exc:  # whatever the evaluator raises, the condition does not hold
            return ConditionVerdict(False, error=_explain(exc))
        if value is True or value is False:
            return ConditionVerdict(value)
        return ConditionVerdict(False, error=f"gave {_cel_type(value)}, not true or false")


def compile_condition(source: str) -> Condition | None:
    """``source`` as a bounded ``Condition``; None for a blank one (no condition at all);
    ``InvalidCondition`` saying what to simplify when it is not CEL or cannot be bounded.

    Kept per source: every call a grant checks asks for the same few conditions."""
    source = source.strip()
    return _compiled(source) if source else None


@functools.lru_cache(maxsize=256)
def _compiled(source: str) -> Condition:
    if len(source) > MAX_CONDITION_LENGTH:
        raise InvalidCondition(f"The condition is longer than {MAX_CONDITION_LENGTH} characters")
    if _bracket_depth(source) > MAX_BRACKET_DEPTH:
        raise InvalidCondition(
            f"The condition nests brackets more than {MAX_BRACKET_DEPTH} deep: "
            "simplify it into parts joined with && or ||"
        )
    try:
        program = cel.compile(source)
    except Exception as exc:  # the compiler's errors are not one class
        raise InvalidCondition(f"The condition is not a valid expression: {_first_line(exc)}") from None
    try:
        tree = _Converter().convert(CELParser().parse(source))
    except InvalidCondition:
        raise
    except Exception:  # CELParseError, _Unexpected: the Rust compiler took it, this module cannot read it
        raise InvalidCondition("The condition uses syntax that cannot be checked: simplify it") from None
    _check_nesting(tree)
    scan = _Scan()
    scan.visit(tree, frozenset(), 0)
    if scan.loops > MAX_LOOPS:
        raise InvalidCondition(
            f"The condition uses more than {MAX_LOOPS} of all, exists, exists_one, map and filter: "
            "simplify it to check fewer lists"
        )
    _check_static_cost(tree, frozenset(scan.fields | scan.type_names))
    return Condition(
        source=source,
        fields=frozenset(scan.fields),
        _tree=tree,
        _program=program,
        _type_names=frozenset(scan.type_names),
    )


def check_against_schema(condition: Condition, schema: Mapping[str, Any]) -> None:
    """``InvalidCondition`` naming the field when ``condition`` reads an argument (or a field of one)
    that the tool's parameters JSON ``schema`` does not have, or compares one with a literal of a
    type the schema rules out. Lenient where the schema says nothing (free-form objects)."""
    _SchemaCheck(schema).visit(condition._tree, {})


# The tree this module measures: the operations of the expression, without the grammar's layers.


class _Kind(enum.StrEnum):
    INT = "int"
    UINT = "uint"
    DOUBLE = "double"
    STRING = "string"
    BYTES = "bytes"
    BOOL = "bool"
    NULL = "null"


@dataclass(frozen=True, slots=True)
class _Lit:
    kind: _Kind
    text: str
    #: Its size: 1, or a string's length in units.
    units: int


@dataclass(frozen=True, slots=True)
class _Var:
    name: str


@dataclass(frozen=True, slots=True)
class _Select:
    operand: _Node
    name: str


@dataclass(frozen=True, slots=True)
class _Has:
    operand: _Node
    name: str


@dataclass(frozen=True, slots=True)
class _Index:
    operand: _Node
    index: _Node


@dataclass(frozen=True, slots=True)
class _Unary:
    op: str
    operand: _Node


@dataclass(frozen=True, slots=True)
class _Binary:
    op: str
    left: _Node
    right: _Node


@dataclass(frozen=True, slots=True)
class _Logic:
    op: str
    operands: tuple[_Node, ...]


@dataclass(frozen=True, slots=True)
class _Choice:
    test: _Node
    then: _Node
    otherwise: _Node


@dataclass(frozen=True, slots=True)
class _List:
    items: tuple[_Node, ...]


@dataclass(frozen=True, slots=True)
class _Map:
    entries: tuple[tuple[_Node, _Node], ...]


@dataclass(frozen=True, slots=True)
class _Call:
    #: A method's receiver is its first argument.
    name: str
    args: tuple[_Node, ...]


@dataclass(frozen=True, slots=True)
class _Loop:
    macro: str
    var: str
    over: _Node
    #: map's filter (its three-argument form); None otherwise.
    test: _Node | None
    #: The predicate of all, exists, exists_one and filter; map's transform.
    body: _Node


_Node = (
    _Lit | _Var | _Select | _Has | _Index | _Unary | _Binary | _Logic | _Choice | _List | _Map | _Call | _Loop
)
_NODE_TYPES = (_Lit, _Var, _Select, _Has, _Index, _Unary, _Binary, _Logic, _Choice, _List, _Map, _Call, _Loop)

_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
#: Functions whose cost is known, with how many arguments each takes (besides a method's receiver).
_FUNCTIONS = {
    name: 1
    for name in ("size", "int", "uint", "double", "string", "bytes", "duration", "timestamp", "type", "dyn")
}
_METHODS: dict[str, tuple[int, ...]] = {
    "size": (0,),
    "contains": (1,),
    "startsWith": (1,),
    "endsWith": (1,),
    **{
        getter: (0, 1)  # a timestamp's getters take an optional time zone
        for getter in (
            "getFullYear",
            "getMonth",
            "getDate",
            "getDayOfMonth",
            "getDayOfWeek",
            "getDayOfYear",
            "getHours",
            "getMinutes",
            "getSeconds",
            "getMilliseconds",
        )
    },
}
_TYPE_NAMES = frozenset(
    {"int", "uint", "double", "string", "bytes", "bool", "list", "map", "null_type", "type"}
)
_ALLOWED = (
    "comparisons, arithmetic, &&, ||, ?:, size, contains, startsWith, endsWith, int, uint, double, "
    "string, bytes, timestamp, duration, type, dyn, has and all, exists, exists_one, map, filter"
)
_LITERAL_KINDS = {
    "INT_LIT": _Kind.INT,
    "UINT_LIT": _Kind.UINT,
    "FLOAT_LIT": _Kind.DOUBLE,
    "STRING_LIT": _Kind.STRING,
    "MLSTRING_LIT": _Kind.STRING,
    "BYTES_LIT": _Kind.BYTES,
    "BOOL_LIT": _Kind.BOOL,
    "NULL_LIT": _Kind.NULL,
}
_OPERATORS = {
    "relation_lt": "<",
    "relation_le": "<=",
    "relation_gt": ">",
    "relation_ge": ">=",
    "relation_eq": "==",
    "relation_ne": "!=",
    "relation_in": "in",
    "addition_add": "+",
    "addition_sub": "-",
    "multiplication_mul": "*",
    "multiplication_div": "/",
    "multiplication_mod": "%",
    "unary_not": "!",
    "unary_neg": "-",
}


@dataclass(frozen=True, slots=True)
class _Pending:
    """An operator the grammar hands over before its right operand (``relation_lt: relation "<"``)."""

    op: str
    left: _Node | None


@dataclass(frozen=True, slots=True)
class _Items:
    values: tuple[_Node, ...]


class _Unexpected(Exception):
    """A parse tree this module does not know how to read (refused, never guessed at)."""


class _Converter:
    """The parser's tree as ``_Node``s, children before parents (Lark's ``iter_subtrees`` order), so
    that no recursion follows the parse tree however deep it is."""

    def __init__(self) -> None:
        self.done: dict[int, object] = {}

    def convert(self, parsed: Tree[Token]) -> _Node:
        for subtree in parsed.iter_subtrees():
            self.done[id(subtree)] = self.one(subtree)
        return self.node(parsed)

    def part(self, child: Tree[Token] | Token) -> object:
        return child if isinstance(child, Token) else self.done[id(child)]

    def node(self, child: Tree[Token] | Token) -> _Node:
        value = self.part(child)
        if not isinstance(value, _NODE_TYPES):
            raise _Unexpected(child)
        return value

    def pending(self, child: Tree[Token] | Token) -> _Pending:
        value = self.part(child)
        if not isinstance(value, _Pending):
            raise _Unexpected(child)
        return value

    def items(self, children: list[Tree[Token] | Token], at: int) -> tuple[_Node, ...]:
        if len(children) <= at:
            return ()
        value = self.part(children[at])
        return value.values if isinstance(value, _Items) else (self.node(children[at]),)

    def one(self, tree: Tree[Token]) -> object:
        rule, children = str(tree.data), tree.children
        if rule in _OPERATORS:
            return _Pending(_OPERATORS[rule], self.node(children[0]) if children else None)
        if rule in ("expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication"):
            return self.layer(rule, children)
        if rule in _REFUSED_RULES:
            raise InvalidCondition(_REFUSED_RULES[rule])
        build = self.BUILDERS.get(rule)
        if build is None:
            raise _Unexpected(tree)
        return build(self, children)

    def unary(self, children: list[Tree[Token] | Token]) -> _Node:
        if len(children) == 1:
            return self.node(children[0])
        return _Unary(self.pending(children[0]).op, self.node(children[1]))

    def map_literal(self, children: list[Tree[Token] | Token]) -> _Node:
        flat = self.items(children, 0)
        return _Map(tuple(zip(flat[::2], flat[1::2], strict=True)))

    #: How each rule of the parse tree becomes a node (the others: ``one``).
    BUILDERS: ClassVar[dict[str, Callable[[_Converter, list[Tree[Token] | Token]], object]]] = {
        "unary": unary,
        "member": lambda self, c: self.node(c[0]),
        "primary": lambda self, c: self.node(c[0]),
        "paren_expr": lambda self, c: self.node(c[0]),
        "member_dot": lambda self, c: _Select(self.node(c[0]), str(c[1])),
        "member_index": lambda self, c: _Index(self.node(c[0]), self.node(c[1])),
        "member_dot_arg": lambda self, c: self.method(self.node(c[0]), str(c[1]), self.items(c, 2)),
        "ident_arg": lambda self, c: self.function(str(c[0]), self.items(c, 1)),
        "ident": lambda self, c: _Var(str(c[0])),
        "literal": lambda self, c: self.literal(c[0]),
        "list_lit": lambda self, c: _List(self.items(c, 0)),
        "map_lit": map_literal,
        "exprlist": lambda self, c: _Items(tuple(self.node(child) for child in c)),
        "mapinits": lambda self, c: _Items(tuple(self.node(child) for child in c)),
    }

    def layer(self, rule: str, children: list[Tree[Token] | Token]) -> _Node:
        if len(children) == 1:
            return self.node(children[0])
        if rule == "expr":
            return _Choice(*(self.node(child) for child in children))
        if rule in ("conditionalor", "conditionaland"):
            op = "||" if rule == "conditionalor" else "&&"
            left, right = self.node(children[0]), self.node(children[1])
            # A chain of && (or of ||) is one operation: it nests no deeper however long it is.
            operands = left.operands if isinstance(left, _Logic) and left.op == op else (left,)
            return _Logic(op, (*operands, right))
        pending = self.pending(children[0])
        if pending.left is None:
            raise _Unexpected(children[0])
        return _Binary(pending.op, pending.left, self.node(children[1]))

    def literal(self, token: Tree[Token] | Token) -> _Lit:
        if not isinstance(token, Token) or token.type not in _LITERAL_KINDS:
            raise _Unexpected(token)
        kind = _LITERAL_KINDS[token.type]
        text = str(token)
        # The text's UTF-8 length is at least its value's: escapes only shorten it.
        units = _string_units(len(text.encode("utf-8", "surrogatepass")))
        return _Lit(kind, text, units if kind in (_Kind.STRING, _Kind.BYTES) else 1)

    def function(self, name: str, args: tuple[_Node, ...]) -> _Node:
        if name == "has":
            if len(args) != 1 or not isinstance(args[0], _Select):
                raise InvalidCondition("has() takes one field, e.g. has(meta.tier)")
            return _Has(args[0].operand, args[0].name)
        if name not in _FUNCTIONS:
            raise _unbounded(name)
        if len(args) != _FUNCTIONS[name]:
            raise InvalidCondition(f"{name}() takes one argument")
        return _Call(name, args)

    def method(self, receiver: _Node, name: str, args: tuple[_Node, ...]) -> _Node:
        if name in _MACROS:
            return self.macro(receiver, name, args)
        if name not in _METHODS:
            raise _unbounded(name)
        if len(args) not in _METHODS[name]:
            raise InvalidCondition(f"{name}() takes {' or '.join(map(str, _METHODS[name]))} argument(s)")
        return _Call(name, (receiver, *args))

    def macro(self, receiver: _Node, name: str, args: tuple[_Node, ...]) -> _Node:
        arities = (2, 3) if name == "map" else (2,)
        if len(args) not in arities or not isinstance(args[0], _Var):
            raise InvalidCondition(f"{name}() takes a name and an expression, e.g. items.{name}(i, i > 0)")
        if len(args) == 3:
            return _Loop(name, args[0].name, receiver, args[1], args[2])
        return _Loop(name, args[0].name, receiver, None, args[1])


def _unbounded(name: str) -> InvalidCondition:
    return InvalidCondition(
        f"The condition uses {name}(), whose cost cannot be bounded: simplify it to use only {_ALLOWED}"
    )


def _children(node: _Node) -> Iterator[_Node]:
    match node:
        case _Select(operand=operand) | _Has(operand=operand) | _Unary(operand=operand):
            yield operand
        case _Index(operand=operand, index=index):
            yield from (operand, index)
        case _Binary(left=left, right=right):
            yield from (left, right)
        case _Logic(operands=operands) | _List(items=operands) | _Call(args=operands):
            yield from operands
        case _Choice(test=test, then=then, otherwise=otherwise):
            yield from (test, then, otherwise)
        case _Map(entries=entries):
            for key, value in entries:
                yield from (key, value)
        case _Loop(over=over, test=test, body=body):
            yield from (over, body) if test is None else (over, test, body)
        case _:
            pass


def _check_nesting(tree: _Node) -> None:
    # Iterative: the tree is checked before anything walks it recursively.
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise InvalidCondition(
                f"The condition is nested more than {MAX_NESTING} levels deep: simplify it into shorter parts"
            )
        stack.extend((child, depth + 1) for child in _children(node))


_QUOTE = re.compile(r"""[rRbB]*('''|\"\"\"|'|")""")


def _bracket_depth(source: str) -> int:
    """The deepest nesting of (), [] and {} outside string literals (a cheap scan of the raw text)."""
    depth = deepest = 0
    at = 0
    while at < len(source):
        char = source[at]
        quote = _QUOTE.match(source, at) if char in "'\"rRbB" else None
        if quote is not None:
            at = _string_end(source, quote.end(), quote.group(1))
            continue
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth -= 1
        at += 1
    return deepest


def _string_end(source: str, at: int, quote: str) -> int:
    while at < len(source):
        if source[at] == "\\":
            at += 2
        elif source.startswith(quote, at):
            return at + len(quote)
        else:
            at += 1
    return at


class _Scan:
    """The argument names a tree reads, and its comprehensions' count and nesting."""

    def __init__(self) -> None:
        self.fields: set[str] = set()
        #: Type names (``int`` in ``type(x) == int``), which are arguments when a call has them.
        self.type_names: set[str] = set()
        self.loops = 0

    def visit(self, node: _Node, bound: frozenset[str], loop_depth: int) -> None:
        if isinstance(node, _Var):
            if node.name not in bound:
                (self.type_names if node.name in _TYPE_NAMES else self.fields).add(node.name)
            return
        if isinstance(node, _Loop):
            self.loops += 1
            if loop_depth + 1 > MAX_LOOP_DEPTH:
                raise InvalidCondition(
                    f"The condition nests all, exists, exists_one, map or filter more than {MAX_LOOP_DEPTH} "
                    "deep: simplify it to loop over one list inside another at most"
                )
            self.visit(node.over, bound, loop_depth)
            inner = bound | {node.var}
            for part in (node.test, node.body):
                if part is not None:
                    self.visit(part, inner, loop_depth + 1)
            return
        for child in _children(node):
            self.visit(child, bound, loop_depth)


# Cost bounds. A value's shape is, level by level (the value, its items, their items ...), the most
# items any value at that level holds and the most units any of them takes whole (for strings:
# their length in units). A map's items are its keys and its values together.

_Shape = tuple[tuple[int, int], ...]
_SCALAR: _Shape = ((1, 1),)


def _size(shape: _Shape) -> int:
    return shape[0][0]


def _total(shape: _Shape) -> int:
    return shape[0][1]


def _items_of(shape: _Shape) -> _Shape:
    # A value with no items cannot be indexed: whatever is said of its items, evaluation stops there.
    return shape[1:] or _SCALAR


def _join(*shapes: _Shape) -> _Shape:
    levels = max(len(shape) for shape in shapes)
    return tuple(
        (
            max(shape[level][0] for shape in shapes if level < len(shape)),
            max(shape[level][1] for shape in shapes if level < len(shape)),
        )
        for level in range(levels)
    )


#: Parts of CEL the conditions refuse, with what to write instead.
_REFUSED_RULES = {
    "dot_ident": "The condition starts a name with a dot: write the name without it",
    "dot_ident_arg": "The condition starts a name with a dot: write the name without it",
    "member_object": "The condition builds a message (Name{...}): compare fields instead",
    "fieldinits": "The condition builds a message (Name{...}): compare fields instead",
}


def _string_units(length: int) -> int:
    return 1 + length // _BYTES_PER_UNIT


def _cost(node: _Node, env: Mapping[str, _Shape]) -> tuple[int, _Shape]:
    """An upper bound of ``node``'s evaluation cost, and of the shape of its value, when its
    variables have the shapes in ``env``. Every rule over-approximates: both branches of ?: and
    every operand of && and || count, a comprehension runs its body once per item, == compares
    the smaller operand whole.

    The evaluator copies values whole in places (a field read out of a map, an item bound by a
    comprehension, the items of a list or map it builds, both sides of a concatenation, what map
    and filter have accumulated at each iteration): each copy costs the value's total."""
    match node:
        case _Lit() | _Var() | _Has() | _Select() | _Index() | _Unary():
            return _read_cost(node, env)
        case _Binary():
            return _binary_cost(node, env)
        case _Logic(operands=operands):
            return _STEP + sum(_cost(operand, env)[0] for operand in operands), _SCALAR
        case _Choice(test=test, then=then, otherwise=otherwise):
            (test_cost, _), (then_cost, then_shape), (else_cost, else_shape) = (
                _cost(test, env),
                _cost(then, env),
                _cost(otherwise, env),
            )
            return _STEP + test_cost + then_cost + else_cost, _join(then_shape, else_shape)
        case _List() | _Map():
            return _built_cost(node, env)
        case _Call():
            return _call_cost(node, env)
        case _Loop():
            return _loop_cost(node, env)
    raise AssertionError(node)


def _read_cost(node: _Node, env: Mapping[str, _Shape]) -> tuple[int, _Shape]:
    """A literal, an argument, or what is read out of one (a field, an item, a test, a sign)."""
    match node:
        case _Lit(kind=kind, units=units):
            return _STEP, ((units, units),) if kind in (_Kind.STRING, _Kind.BYTES) else _SCALAR
        case _Var(name=name):
            return _STEP, env.get(name, _SCALAR)
        case _Has(operand=operand, name=name):
            cost, _ = _cost(operand, env)
            return _STEP + cost + _string_units(len(name)), _SCALAR
        case _Select(operand=operand, name=name):
            cost, shape = _cost(operand, env)
            value = _items_of(shape)
            return _STEP + cost + _string_units(len(name)) + _total(value), value
        case _Index(operand=operand, index=index):
            cost, shape = _cost(operand, env)
            index_cost, key = _cost(index, env)
            value = _items_of(shape)
            return _STEP + cost + index_cost + _total(key) + _total(value), value
        case _Unary(operand=operand):
            cost, _ = _cost(operand, env)
            return _STEP + cost, _SCALAR
    raise AssertionError(node)


def _built_cost(node: _Node, env: Mapping[str, _Shape]) -> tuple[int, _Shape]:
    """A list or map the condition builds: every item is copied into it."""
    match node:
        case _List(items=items):
            costs = [_cost(item, env) for item in items]
            total = 1 + sum(_total(shape) for _, shape in costs)
            cost = _STEP + sum(c for c, _ in costs) + total
            return cost, ((len(items), total), *(_join(*(shape for _, shape in costs)) if costs else ()))
        case _Map(entries=entries):
            keys = [_cost(key, env) for key, _ in entries]
            values = [_cost(value, env) for _, value in entries]
            both = keys + values
            total = 1 + sum(_total(shape) for _, shape in both)
            hashing = sum(_total(shape) for _, shape in keys)
            cost = _STEP + sum(c for c, _ in both) + hashing + total
            return cost, ((len(entries), total), *(_join(*(shape for _, shape in both)) if both else ()))
    raise AssertionError(node)


def _binary_cost(node: _Binary, env: Mapping[str, _Shape]) -> tuple[int, _Shape]:
    left_cost, left = _cost(node.left, env)
    right_cost, right = _cost(node.right, env)
    cost = _STEP + left_cost + right_cost
    if node.op == "+":
        # Strings and lists concatenate: the result holds both, and making it copies both.
        joined = ((_size(left) + _size(right), _total(left) + _total(right)),)
        return cost + _total(left) + _total(right), joined + _join(_items_of(left), _items_of(right))
    if node.op in ("==", "!=", "<", "<=", ">", ">="):
        return cost + min(_total(left), _total(right)), _SCALAR
    if node.op == "in":
        # A list is scanned, each item compared with the needle; a map hashes the needle once.
        scan = _size(right) + min(_size(right) * _total(left), _total(right))
        return cost + _total(left) + scan, _SCALAR
    return cost, _SCALAR


def _call_cost(node: _Call, env: Mapping[str, _Shape]) -> tuple[int, _Shape]:
    costs = [_cost(arg, env) for arg in node.args]
    cost = _STEP + sum(c for c, _ in costs)
    shapes = [shape for _, shape in costs]
    if node.name == "dyn":
        return cost, shapes[0]
    if node.name == "type":
        return cost, _SCALAR
    if node.name in ("size", "contains", "startsWith", "endsWith"):
        return cost + sum(_size(shape) for shape in shapes), _SCALAR
    # Conversions and parsing (int("12"), timestamp(...), a getter's time zone) read their input whole.
    cost += _PARSE + sum(_total(shape) for shape in shapes)
    if node.name in ("string", "bytes"):
        # As long as the input, or a number, time or duration written out.
        units = _total(shapes[0]) + _string_units(48)
        return cost, ((units, units),)
    return cost, _SCALAR


def _loop_cost(node: _Loop, env: Mapping[str, _Shape]) -> tuple[int, _Shape]:
    over_cost, over = _cost(node.over, env)
    item = _items_of(over)
    inner = {**env, node.var: item}
    test_cost = 0 if node.test is None else _cost(node.test, inner)[0]
    body_cost, body = _cost(node.body, inner)
    count = _size(over)
    each = _ITERATION + _total(item) + test_cost + body_cost
    if node.macro == "map":
        each += _ACCUMULATE * (1 + count * _total(body))
    elif node.macro == "filter":
        each += _ACCUMULATE * _total(over)
    cost = _STEP + over_cost + _total(over) + count * each
    if node.macro == "map":
        return cost, ((count, 1 + count * _total(body)), *body)
    if node.macro == "filter":
        return cost, over
    return cost, _SCALAR


#: Bits of one digit when the static bound is read in base ``2**_DIGIT`` (``_check_static_cost``).
_DIGIT = 256


def _check_static_cost(tree: _Node, fields: frozenset[str]) -> None:
    """Refuse a condition whose cost grows faster than ``MAX_COST_DEGREE`` in the arguments' size, or
    that is over its budget even on small arguments.

    The growth is read off one evaluation of the bound with every argument of the same huge size
    ``n``: the bound is a polynomial in ``n`` (max and min of polynomials, at a point past where any of
    them cross), so its value at ``n = 2**_DIGIT`` written in base ``n`` has as many digits as the
    polynomial's degree + 1. A coefficient too large for its digit carries into the next one, which
    can only make the degree look higher (and refuse)."""
    depth = _depth(tree) + 1
    huge = 1 << _DIGIT
    bound = _bound_with(tree, fields, huge, depth)
    degree = (bound.bit_length() - 1) // _DIGIT
    if degree > MAX_COST_DEGREE:
        raise InvalidCondition(
            f"The condition's cost grows as its arguments' size to the power {degree}: simplify it to "
            "loop over fewer lists inside one another"
        )
    if _bound_with(tree, fields, SMALL_ARGUMENTS, depth) > EVALUATION_BUDGET:
        on = f" even on small arguments ({SMALL_ARGUMENTS} items)" if fields else ""
        raise InvalidCondition(
            f"The condition would be over its evaluation budget{on}: "
            "simplify it to loop over fewer or shorter lists"
        )


def _bound_with(tree: _Node, fields: frozenset[str], size: int, depth: int) -> int:
    uniform: _Shape = ((size, size),) * depth
    steps, result = _cost(tree, dict.fromkeys(fields, uniform))
    return len(fields) * (_CONVERT + 1) * size + steps + _CONVERT * _total(result)


def _depth(tree: _Node) -> int:
    deepest = 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in _children(node))
    return deepest


# The arguments' sizes, measured level by level without recursion; they are handed to CEL only once
# measured, so what CEL converts is what was measured.

_SCALARS = (bool, int, float, type(None), datetime, timedelta)
_PLAIN_SCALARS = frozenset(_SCALARS)


def _given(fields: frozenset[str], variables: Mapping[str, Any] | None) -> dict[str, Any]:
    if variables is None:
        return {}
    return {name: variables[name] for name in fields if name in variables}


def _measure_all(given: Mapping[str, Any]) -> tuple[dict[str, _Shape], int] | str:
    """Each argument's shape and the cost of converting them all; or why they cannot be checked."""
    shapes: dict[str, _Shape] = {}
    converting = 0
    for name, value in given.items():
        measured = _measure(value, EVALUATION_BUDGET - converting)
        if isinstance(measured, str):
            return f"argument {name!r} {measured}"
        shapes[name], cost = measured
        converting += cost
    return shapes, converting


def _measure(value: Any, allowance: int) -> tuple[_Shape, int] | str:
    # Level by level: each node's item count and its own units, and its parent's index in the
    # level above, so that totals add up from the deepest level without recursion.
    levels: list[list[tuple[int, int, int]]] = []
    current: list[tuple[Any, int]] = [(value, -1)]
    cost = 0
    while current:
        if len(levels) >= _MAX_VALUE_DEPTH:
            return f"is nested more than {_MAX_VALUE_DEPTH} deep: it cannot be checked"
        level: list[tuple[int, int, int]] = []
        below: list[tuple[Any, int]] = []
        for index, (item, parent) in enumerate(current):
            if type(item) in _PLAIN_SCALARS:
                cost += _CONVERT
                level.append((1, 1, parent))
                continue
            measured = _node(item)
            if measured is None:
                return f"holds a value of type {type(item).__name__}, which a condition cannot read"
            size, own, count, children = measured
            cost += _CONVERT + (own - 1)
            # Each item costs at least a conversion one level down: refuse before listing them.
            if cost + _CONVERT * (len(below) + count) > allowance:
                return "is too large to check: over the evaluation budget"
            level.append((size, own, parent))
            below.extend(zip(children, itertools.repeat(index)))
        if cost > allowance:
            return "is too large to check: over the evaluation budget"
        levels.append(level)
        current = below
    return _shape_of(levels), cost


def _node(item: Any) -> tuple[int, int, int, Iterable[Any]] | None:
    """An argument value's size, own units, number of children and children (a map's keys and
    values), unread; None for a value CEL is not handed. Through the unbound methods: a subclass
    cannot report another length, or other items, than CEL will see."""
    if isinstance(item, str):
        length = str.__len__(item)
        units = _string_units(length if str.isascii(item) else 4 * length)
        return units, units, 0, ()
    if isinstance(item, bytes):
        units = _string_units(bytes.__len__(item))
        return units, units, 0, ()
    if isinstance(item, list):
        return list.__len__(item), 1, list.__len__(item), list.__iter__(item)
    if isinstance(item, tuple):
        return tuple.__len__(item), 1, tuple.__len__(item), tuple.__iter__(item)
    if isinstance(item, dict):
        return dict.__len__(item), 1, 2 * dict.__len__(item), itertools.chain.from_iterable(dict.items(item))
    if isinstance(item, _SCALARS):
        return 1, 1, 0, ()
    return None


def _shape_of(levels: list[list[tuple[int, int, int]]]) -> _Shape:
    totals_below: list[int] = []
    shape: list[tuple[int, int]] = []
    for level in reversed(levels):
        totals = [
            own + (totals_below[i] if i < len(totals_below) else 0) for i, (_, own, _) in enumerate(level)
        ]
        shape.append((max(size for size, _, _ in level), max(totals)))
        parents = [0] * (max((parent for _, _, parent in level), default=-1) + 1)
        for (_, _, parent), total in zip(level, totals, strict=True):
            if parent >= 0:
                parents[parent] += total
        totals_below = parents
    return tuple(reversed(shape))


# Errors, as a reviewer reads them.

_UNDEFINED = re.compile(r"Undefined variable or function: '([^']*)'")


def _explain(exc: Exception) -> str:
    text = _first_line(exc)
    undefined = _UNDEFINED.match(text)
    if undefined is not None:
        return f"{undefined.group(1)!r} is not defined for these values"
    if isinstance(exc, KeyError):
        return f"raised KeyError: no field or key {text}"
    if len(text) > 100 and ". " in text:
        text = text.split(". ", 1)[0]
    return f"raised {type(exc).__name__}: {text}"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _cel_type(value: object) -> str:
    names = {bool: "a bool", int: "an int", float: "a double", str: "a string", bytes: "bytes"}
    names |= {list: "a list", dict: "a map", type(None): "null", datetime: "a timestamp"}
    names[timedelta] = "a duration"
    return names.get(type(value), f"a {type(value).__name__}")


# The tool's schema, for what a condition reads: argument names, fields of objects, literal types.

_JSON_KINDS: dict[str, frozenset[_Kind]] = {
    "integer": frozenset({_Kind.INT, _Kind.UINT, _Kind.DOUBLE}),
    "number": frozenset({_Kind.INT, _Kind.UINT, _Kind.DOUBLE}),
    "string": frozenset({_Kind.STRING}),
    "boolean": frozenset({_Kind.BOOL}),
    "null": frozenset({_Kind.NULL}),
    "array": frozenset(),
    "object": frozenset(),
}
_KIND_WORDS = {
    _Kind.INT: "a number",
    _Kind.UINT: "a number",
    _Kind.DOUBLE: "a number",
    _Kind.STRING: "a string",
    _Kind.BYTES: "bytes",
    _Kind.BOOL: "a boolean",
}
_COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">="})

_MAX_SCHEMA_STEPS = 10_000
#: A schema as far as the check knows it: the alternatives a value may match (None: anything).
_Schemas = tuple[Mapping[str, Any], ...] | None


@dataclass(frozen=True)
class _Path:
    text: str
    schemas: _Schemas


class _SchemaCheck:
    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.root = schema
        defs = schema.get("$defs", schema.get("definitions", {}))
        self.defs: Mapping[str, Any] = defs if isinstance(defs, Mapping) else {}
        title = schema.get("title")
        self.tool = title.removesuffix("_arguments") if isinstance(title, str) and title else "the tool"
        self.steps = 0

    def visit(self, node: _Node, env: Mapping[str, _Path]) -> None:
        if isinstance(node, _Loop):
            self.visit(node.over, env)
            over = self.path(node.over, env)
            inner = {**env, node.var: _Path(node.var, None if over is None else self.items(over.schemas))}
            for part in (node.test, node.body):
                if part is not None:
                    self.visit(part, inner)
            return
        if isinstance(node, _Binary):
            self.compare(node, env)
        # A path into the arguments is checked whole (its indexes too); anything else, part by part.
        if isinstance(node, _Var | _Select | _Index | _Has) and self.path(node, env) is not None:
            return
        for child in _children(node):
            self.visit(child, env)

    def path(self, node: _Node, env: Mapping[str, _Path]) -> _Path | None:
        """What ``node`` reads in the arguments, checked against the schema (None: not a field)."""
        if isinstance(node, _Var):
            if node.name in env:
                return env[node.name]
            if node.name in _TYPE_NAMES and not self.has_argument(node.name):
                return None
            return _Path(node.name, self.argument(node.name))
        if isinstance(node, _Select | _Has):
            base = self.path(node.operand, env)
            if base is None:
                return None
            return _Path(f"{base.text}.{node.name}", self.member(base, node.name))
        if isinstance(node, _Index):
            base = self.path(node.operand, env)
            self.visit(node.index, env)
            if base is None:
                return None
            key = node.index
            if isinstance(key, _Lit) and key.kind == _Kind.STRING and self.objects(base.schemas):
                name = _unquote(key.text)
                if name is not None:
                    return _Path(f"{base.text}[{key.text}]", self.member(base, name))
            return _Path(f"{base.text}[...]", self.items(base.schemas))
        return None

    def has_argument(self, name: str) -> bool:
        properties = self.root.get("properties")
        return isinstance(properties, Mapping) and name in properties

    def argument(self, name: str) -> _Schemas:
        properties = self.root.get("properties")
        if isinstance(properties, Mapping) and name in properties:
            return self.alternatives(properties[name])
        if self.open(self.root):
            return None
        names = ", ".join(sorted(properties)) if isinstance(properties, Mapping) else ""
        listing = f" (its arguments: {names})" if names else " (it takes none)"
        raise InvalidCondition(
            f"The condition names {name!r}, which is not an argument of {self.tool}{listing}"
        )

    def member(self, base: _Path, name: str) -> _Schemas:
        if base.schemas is None:
            return None
        found: list[Mapping[str, Any]] = []
        fields: set[str] = set()
        for schema in base.schemas:
            kinds = self.types(schema)
            if kinds is not None and "object" not in kinds:
                continue
            properties = schema.get("properties")
            if isinstance(properties, Mapping) and name in properties:
                found.extend(self.alternatives(properties[name]) or ({},))
            elif self.open(schema):
                extra = schema.get("additionalProperties")
                found.extend((self.alternatives(extra) if isinstance(extra, Mapping) else None) or ({},))
            elif isinstance(properties, Mapping):
                fields.update(properties)
        if found:
            return tuple(found) if all(found) else None
        listing = f" (its fields: {', '.join(sorted(fields))})" if fields else ""
        raise InvalidCondition(
            f"The condition names {base.text}.{name}, which {base.text} does not have{listing}"
        )

    def open(self, schema: Mapping[str, Any]) -> bool:
        """Whether an object may hold names its schema does not list."""
        extra = schema.get("additionalProperties", schema.get("properties") is None)
        return extra is not False

    def items(self, schemas: _Schemas) -> _Schemas:
        if schemas is None:
            return None
        found: list[Mapping[str, Any]] = []
        for schema in schemas:
            kinds = self.types(schema)
            if kinds is None:
                return None
            if "array" in kinds:
                items = schema.get("items")
                if not isinstance(items, Mapping):
                    return None
                found.extend(self.alternatives(items) or ({},))
            if "object" in kinds:
                found.append({"type": "string"})  # a map's comprehension iterates its keys
        return tuple(found) if found and all(found) else None

    def objects(self, schemas: _Schemas) -> bool:
        return schemas is not None and any("object" in (self.types(s) or ()) for s in schemas)

    def alternatives(self, schema: Any, seen: int = 0) -> _Schemas:
        """The schemas a value of ``schema`` matches one of, ``$ref``s followed (None: anything)."""
        # Bounded like everything else here: a schema whose $refs loop through anyOf would branch
        # without end; past the bound it says nothing, and nothing is refused for it.
        self.steps += 1
        if not isinstance(schema, Mapping) or seen > _MAX_VALUE_DEPTH or self.steps > _MAX_SCHEMA_STEPS:
            return None
        ref = schema.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            return self.alternatives(self.defs.get(name), seen + 1) if ref.startswith("#/") else None
        for key in ("anyOf", "oneOf", "allOf"):
            options = schema.get(key)
            if key == "allOf" and isinstance(options, list) and len(options) != 1:
                return None
            if isinstance(options, list):
                found: list[Mapping[str, Any]] = []
                for option in options:
                    resolved = self.alternatives(option, seen + 1)
                    if resolved is None:
                        return None
                    found.extend(resolved)
                return tuple(found)
        return (schema,)

    def types(self, schema: Mapping[str, Any]) -> frozenset[str] | None:
        kind = schema.get("type")
        if isinstance(kind, str):
            return frozenset({kind})
        if isinstance(kind, list) and all(isinstance(k, str) for k in kind):
            return frozenset(kind)
        values = schema["enum"] if isinstance(schema.get("enum"), list) else None
        if "const" in schema:
            values = [schema["const"]]
        if values is not None:
            return frozenset(_json_type(value) for value in values)
        return None

    def kinds(self, schemas: _Schemas) -> tuple[frozenset[_Kind], str] | None:
        if schemas is None:
            return None
        kinds: set[_Kind] = set()
        words: list[str] = []
        for schema in schemas:
            types = self.types(schema)
            if types is None:
                return None
            for name in sorted(types):
                kinds |= _JSON_KINDS.get(name, frozenset(_Kind))
                words.append(name)
        return frozenset(kinds), " or ".join(dict.fromkeys(w for w in words if w != "null")) or "null"

    def compare(self, node: _Binary, env: Mapping[str, _Path]) -> None:
        pairs: list[tuple[_Path | None, _Node]] = []
        if node.op in _COMPARISONS:
            pairs = [(self.read(node.left, env), node.right), (self.read(node.right, env), node.left)]
        elif node.op == "in" and isinstance(node.right, _List):
            pairs = [(self.read(node.left, env), item) for item in node.right.items]
        elif node.op == "in":
            container = self.read(node.right, env)
            if container is not None:
                items = _Path(f"an item of {container.text}", self.items(container.schemas))
                pairs = [(items, node.left)]
        for path, other in pairs:
            if path is None or not isinstance(other, _Lit) or other.kind not in _KIND_WORDS:
                continue
            known = self.kinds(path.schemas)
            if known is None:
                continue
            kinds, words = known
            if other.kind not in kinds:
                raise InvalidCondition(
                    f"The condition compares {path.text} ({_article(words)}) with {other.text} "
                    f"({_KIND_WORDS[other.kind]}): write {_article(words)} instead"
                )

    def read(self, node: _Node, env: Mapping[str, _Path]) -> _Path | None:
        return self.path(node, env) if isinstance(node, _Var | _Select | _Index) else None


def _article(words: str) -> str:
    return f"an {words}" if words[0] in "aeiou" else f"a {words}"


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _unquote(text: str) -> str | None:
    """A plain string literal's value (no prefix, no escapes); None for any other."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" and "\\" not in text:
        return text[1:-1]
    return None
