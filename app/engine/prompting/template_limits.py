"""A Jinja sandbox whose renders are bounded in time, in size and in what they may call.

A chat template is code from whoever made the model file. Jinja's sandbox keeps it
away from our objects, but not from our CPU and memory: ``range`` loops nested three
deep, ``'%01000000000d' % 1`` or ``'x'|center(10**9)`` all stay "inside the sandbox".
This environment bounds every way a template can spend time or memory:

* Time: every loop iteration, call and filter "ticks"; a tick past the deadline, or
  after the reply was stopped, ends the render. A template cannot run Python code
  between ticks for longer than one bounded operation takes, so no watchdog thread
  or child process is needed, and Stop works within one tick.
* Size: every operation that can make a value much bigger than its inputs (repetition,
  ``%`` and ``format`` widths, padding filters and methods, joins, replaces, concatenation,
  big integers) is checked *before* it runs against the render's output limit, and
  the output is counted as it streams.
* Calls: methods of built-in types are allowed from a list of the harmless ones
  (``int.to_bytes(10**9)`` is not a string method, but just as big).

Anything refused raises ``TemplateLimitError`` with one line saying what went over.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import re
import string
import threading
import time
import types
from collections.abc import ItemsView, KeysView, ValuesView
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Iterator

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.runtime import markup_join, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Cycler, Joiner, Namespace, generate_lorem_ipsum

RENDER_SECONDS = 2.0          # a real template renders a long chat in milliseconds
OUTPUT_BASE_CHARS = 1 << 20   # output allowed on top of what the messages themselves bring
RANGE_LIMIT = 100_000         # Jinja's own sandbox limit for one range()
WIDTH_LIMIT = 10_000          # paddings, widths, counts: real templates use tens
INT_BITS_LIMIT = 1 << 16      # integers beyond ~20,000 digits only serve to burn CPU
TEXT_FILTER_CHARS = 100_000   # regex-based filters (wordwrap, urlize, striptags) slow down on more
LIPSUM_WORDS = 10_000


class TemplateLimitError(Exception):
    """A template went over one of the render's limits (what, in the message)."""


class RenderStopped(Exception):
    """The reply was stopped while its template was rendering."""


@dataclass
class _Budget:
    deadline: float
    seconds: float
    output_chars: int
    cancel: Any = None  # a threading.Event, or None

    def tick(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise RenderStopped("stopped while the chat template rendered")
        if time.monotonic() > self.deadline:
            raise TemplateLimitError(f"it ran longer than {self.seconds:g} s")


_local = threading.local()  # this thread's render budget and stop flag


def _budget() -> _Budget | None:
    return getattr(_local, "budget", None)


def _tick() -> None:
    budget = _budget()
    if budget is not None:
        budget.tick()


def _cap() -> int:
    budget = _budget()
    # Outside a render (Jinja folds constants at compile time) the base limit holds.
    return budget.output_chars if budget is not None else OUTPUT_BASE_CHARS


def _ensure(size: int, what: str) -> None:
    cap = _cap()
    if size > cap:
        raise TemplateLimitError(f"{what} would make {size:,} characters (the limit is {cap:,})")


def _ensure_small(value: Any, limit: int, what: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > limit:
        raise TemplateLimitError(f"{what} {value:,} is over the limit of {limit:,}")


def text_size(value: Any, limit: int | None = None) -> int:
    """About how many characters ``str(value)`` has; counting stops once past ``limit``.

    Iterative and bounded by ``limit``, so a list holding itself a thousand times over
    (a DAG of a billion leaves in a few kilobytes) is judged in ``limit`` steps."""
    limit = _cap() if limit is None else limit
    total, stack = 0, [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            total += len(item) + 2
        elif isinstance(item, bool) or item is None or isinstance(item, float):
            total += 8
        elif isinstance(item, int):
            total += item.bit_length() // 3 + 2
        elif isinstance(item, dict):
            total += 2 + 4 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset, KeysView, ValuesView, ItemsView)):
            total += 2 + 2 * len(item)
            stack.extend(item)
        elif isinstance(item, Namespace):  # its repr lists its attributes
            attributes = getattr(item, "_Namespace__attrs", {})
            total += 16 + 4 * len(attributes)
            stack.extend(attributes.values())
        else:
            total += 64  # Undefined, loop, macro, cycler...: short fixed reprs
    return total


def _check_size(result: Any) -> Any:
    if isinstance(result, (str, bytes, list, tuple, dict)):
        _ensure(len(result), "a value")
    return result


# --- operators ----------------------------------------------------------------------------

_PRINTF_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _check_printf(template: str, arguments: Any) -> None:
    """``'%01000000000d' % 1`` asks C for a billion characters in one step: refuse widths first."""
    for match in _PRINTF_SPEC.finditer(template):
        for number in match.groups():
            if number == "*":
                raise TemplateLimitError("'*' widths in % formatting are not allowed")
            if number is not None:
                _ensure_small(int(number), WIDTH_LIMIT, "a % format width of")
    _ensure(len(template) + text_size(arguments), "% formatting")


def _check_format_string(template: str) -> None:
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError:
        return  # str.format raises the same error itself
    for _literal, _name, spec, _conversion in fields:
        if not spec:
            continue
        if "{" in spec:
            raise TemplateLimitError("nested {} widths in format() are not allowed")
        for number in re.findall(r"\d+", spec):
            _ensure_small(int(number), WIDTH_LIMIT, "a format width of")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_binop(operator: str, left: Any, right: Any) -> None:
    sized = (str, bytes, list, tuple)
    if operator == "*":
        for sequence, count in ((left, right), (right, left)):
            if isinstance(sequence, sized) and isinstance(count, int):
                _ensure(len(sequence) * max(count, 0), "repeating a value")
        if _is_int(left) and _is_int(right) and left.bit_length() + right.bit_length() > INT_BITS_LIMIT:
            raise TemplateLimitError("an integer product is too big")
    elif operator == "+":
        if isinstance(left, sized) and isinstance(right, sized):
            _ensure(len(left) + len(right), "joining two values")
    elif operator == "%":
        if isinstance(left, (str, bytes)):
            _check_printf(left if isinstance(left, str) else left.decode("latin-1"), right)
    elif operator == "**":
        if _is_int(left) and _is_int(right) and right > 0 and abs(left) > 1 \
                and left.bit_length() * right > INT_BITS_LIMIT:
            raise TemplateLimitError("an integer power is too big")


# --- filters ------------------------------------------------------------------------------

# Each check gets the filter's arguments by name (bound to its signature, defaults filled in).

def _check_center(a: dict) -> None:
    _ensure_small(a["width"], WIDTH_LIMIT + len(str(a["value"])), "a width of")


def _check_indent(a: dict) -> None:
    text, width = str(a["s"]), a["width"]
    pad = width if _is_int(width) else len(str(width))
    _ensure_small(pad, WIDTH_LIMIT, "an indent of")
    _ensure(len(text) + (text.count("\n") + 1) * max(pad, 0), "indenting")


def _check_replace(a: dict) -> None:
    _check_replacing(a["s"], a["old"], a["new"], a["count"])


def _check_replacing(s: Any, old: Any, new: Any, count: Any = None) -> None:
    text, old, new = str(s), str(old), str(new)
    found = text.count(old)
    if _is_int(count) and count >= 0:
        found = min(found, count)
    _ensure(len(text) + found * max(len(new) - len(old), 0), "replace()")


def _check_batch(a: dict) -> None:
    _ensure_small(a["linecount"], WIDTH_LIMIT, "a batch of")


def _check_slice(a: dict) -> None:
    _ensure_small(a["slices"], WIDTH_LIMIT, "a slice count of")


def _check_wordwrap(a: dict) -> None:
    text = str(a["s"])
    _check_text_filter(text)
    _ensure(len(text) * (1 + len(str(a["wrapstring"] or "\n"))), "wordwrap")


def _check_text_filter(value: Any) -> None:
    if len(str(value)) > TEXT_FILTER_CHARS:
        raise TemplateLimitError(f"text filters take at most {TEXT_FILTER_CHARS:,} characters")


def _check_tojson(a: dict) -> None:
    indent = a["indent"]
    _ensure_small(indent, 16, "a JSON indent of")
    _ensure(text_size(a["value"]) * (1 + (indent if _is_int(indent) and indent > 0 else 0)), "tojson")


def _check_format_filter(a: dict) -> None:
    _check_printf(str(a["value"]), (a["args"], a["kwargs"]))


def _check_sum(a: dict) -> None:
    if not isinstance(a["start"], (int, float)):
        raise TemplateLimitError("sum() adds numbers only")  # summing lists is quadratic


def _check_escaped(value: Any) -> None:
    _ensure(6 * text_size(value), "escaping")  # '<' becomes '&lt;' and so on


def _check_text(value: Any) -> None:
    if type(value) is not str:  # a string is as long as it is; a list may hide a billion
        _ensure(text_size(value), "a value as text")


def _check_join(a: dict) -> None:
    _ensure(text_size(a["value"]) + len(str(a["d"])) * len(a["value"]), "join")


# Checks that need the filter's arguments by name (bound to its signature, defaults in)...
_FILTER_CHECKS: dict[str, Callable[[dict], None]] = {
    "center": _check_center, "indent": _check_indent, "replace": _check_replace,
    "batch": _check_batch, "slice": _check_slice, "wordwrap": _check_wordwrap,
    "tojson": _check_tojson, "format": _check_format_filter, "sum": _check_sum, "join": _check_join,
}
# ...and checks of the value alone, kept cheap: ``|trim`` runs once per message.
_VALUE_CHECKS: dict[str, Callable[[Any], None]] = {
    "urlize": _check_text_filter, "striptags": _check_text_filter,
    "e": _check_escaped, "escape": _check_escaped, "forceescape": _check_escaped,
    "urlencode": _check_escaped, "xmlattr": _check_escaped,
    **{name: _check_text for name in ("string", "pprint", "capitalize", "title", "lower", "upper", "trim",
                                      "truncate", "wordcount", "safe")},
}
_PASSED_FIRST = ("eval_ctx", "environment", "env", "context")


def _bounded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    check, value_check = _FILTER_CHECKS.get(name), _VALUE_CHECKS.get(name)
    # Filters marked pass_context / pass_environment get that first: the value comes next.
    skip = 1 if getattr(function, "jinja_pass_arg", None) is not None else 0
    signature = inspect.signature(function)
    parameters = list(signature.parameters.values())
    if skip and parameters and parameters[0].name in _PASSED_FIRST:
        parameters = parameters[1:]  # (async variants show the signature without it)
    signature = signature.replace(parameters=parameters)

    @functools.wraps(function)  # keeps jinja_pass_arg, so Jinja still passes what it expects
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _tick()
        if value_check is not None and len(args) > skip:
            value_check(args[skip])
        elif check is not None:
            try:
                bound = signature.bind(*args[skip:], **kwargs)
            except TypeError:
                bound = None  # wrong arguments: the filter itself says so below
            if bound is not None:
                bound.apply_defaults()
                if name == "join":  # consumed twice (checked, then joined): a list once
                    bound.arguments["value"] = list(bound.arguments["value"])
                    args, kwargs = (*args[:skip], *bound.args), bound.kwargs
                check(bound.arguments)
        return _check_size(function(*args, **kwargs))

    return bounded


# --- calls --------------------------------------------------------------------------------

# Methods of built-in types a template may call: none of them makes anything much
# bigger than its receiver. The width-taking ones are checked below; the rest refused.
_TEXT_METHODS = frozenset(
    "capitalize casefold count decode encode endswith find index isalnum isalpha isascii isdecimal "
    "isdigit isidentifier islower isnumeric isprintable isspace istitle isupper lower lstrip partition "
    "removeprefix removesuffix rfind rindex rpartition rsplit rstrip split splitlines startswith strip "
    "swapcase title upper".split())
_OTHER_METHODS = frozenset("get items keys values copy index count bit_length is_integer".split())
_BUILTIN_CALLABLES = (types.BuiltinMethodType, types.BuiltinFunctionType, types.MethodWrapperType,
                      types.MethodDescriptorType, types.WrapperDescriptorType, types.ClassMethodDescriptorType)
_ALLOWED_TYPES = (dict, Namespace, Cycler, Joiner)


def _checked_call(function: Any, args: tuple, kwargs: dict) -> tuple:
    """Refuse a call that could blow up; returns the arguments to call with."""
    receiver = getattr(function, "__self__", None)
    name = getattr(function, "__name__", "")
    if isinstance(receiver, (str, bytes)) and not isinstance(receiver, types.ModuleType):
        # Markup's methods are Python wrappers around str's: judged by name alike.
        if name in _TEXT_METHODS:
            return args
        if name in ("center", "ljust", "rjust", "zfill") and args:
            _ensure_small(args[0], WIDTH_LIMIT + len(receiver), "a width of")
            return args
        if name == "replace" and len(args) >= 2:
            _check_replacing(receiver, *args)
            return args
        if name == "expandtabs":
            size = args[0] if args else kwargs.get("tabsize", 8)
            _ensure_small(size, 64, "a tab size of")
            return args
        if name == "join" and len(args) == 1:
            items = list(args[0])
            _ensure(text_size(items) + len(receiver) * len(items), "join()")
            return (items,)
        raise TemplateLimitError(f"calling {type(receiver).__name__}.{name}() is not allowed")
    if isinstance(function, type):
        if issubclass(function, _ALLOWED_TYPES):
            return args
        raise TemplateLimitError(f"calling {function.__name__}() is not allowed")
    if isinstance(function, _BUILTIN_CALLABLES):
        if name in _OTHER_METHODS and receiver is not None and not isinstance(receiver, types.ModuleType):
            return args
        owner = type(receiver).__name__ + "." if receiver is not None else ""
        raise TemplateLimitError(f"calling {owner}{name}() is not allowed")
    return args  # macros, loop(), cycler.next(), our own globals: Python code that ticks


# --- globals ------------------------------------------------------------------------------

def _range(*args: int) -> range:
    numbers = range(*args)
    if len(numbers) > RANGE_LIMIT:
        raise TemplateLimitError(f"range() of {len(numbers):,} numbers is over the limit of {RANGE_LIMIT:,}")
    return numbers


def _lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:  # noqa: A002 — Jinja's names
    for value in (n, min, max):
        _ensure_small(value, LIPSUM_WORDS, "lipsum() of")
    if int(n) * int(max) > LIPSUM_WORDS:
        raise TemplateLimitError(f"lipsum() of more than {LIPSUM_WORDS:,} words is not allowed")
    return generate_lorem_ipsum(n, html, min, max)


_STRFTIME_WIDTH = re.compile(r"%[-_0^#]*\d")


def _strftime_now(fmt: str) -> str:
    fmt = str(fmt)
    if len(fmt) > 1000 or _STRFTIME_WIDTH.search(fmt):  # glibc pads '%1000000000Y' as asked
        raise TemplateLimitError("strftime_now() takes a short format without widths")
    return datetime.now().strftime(fmt)


def _tojson(value: Any, indent: Any = None, separators: Any = None, sort_keys: bool = False,
            ensure_ascii: bool = False) -> str:
    """``tojson`` as Hugging Face renders it, so a model sees the JSON it was trained on:
    keys in their order, text unescaped (Jinja's own sorts keys and writes ``<`` as
    ``\\u003c``). What a client sent is guarded as content is (chat.py) before it gets here."""
    return json.dumps(value, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)


# --- the environment ----------------------------------------------------------------------

_TICK = "tandem_tick"  # an EnvironmentAttribute by this name compiles to a tick


def _tick_node(lineno: int) -> nodes.EnvironmentAttribute:
    # Jinja allows no new node types; templates cannot make EnvironmentAttribute nodes
    # (only extensions can), so this one stands for "call the tick", unsandboxed and cheap.
    return nodes.EnvironmentAttribute(_TICK, lineno=lineno)


class _BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator, with a tick in every loop and concatenation checked."""

    def visit_For(self, node: nodes.For, frame: Frame) -> None:
        node = copy.copy(node)  # the parsed tree stays as parsed
        node.body = [nodes.ExprStmt(_tick_node(node.lineno), lineno=node.lineno), *node.body]
        if node.test is not None:  # filtered loops skip the body: tick in the filter too
            node.test = nodes.And(_tick_node(node.lineno), node.test, lineno=node.lineno)
        super().visit_For(node, frame)

    def visit_EnvironmentAttribute(self, node: nodes.EnvironmentAttribute, frame: Frame) -> None:
        if node.name == _TICK:
            self.write(f"environment.{_TICK}()")
        else:
            super().visit_EnvironmentAttribute(node, frame)

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        autoescape = "context.eval_ctx.autoescape" if frame.eval_ctx.volatile else repr(
            bool(frame.eval_ctx.autoescape))
        self.write(f"environment.tandem_concat({autoescape}, (")
        for argument in node.nodes:
            self.visit(argument, frame)
            self.write(", ")
        self.write("))")


_SCALARS = frozenset({str, int, float, bool, type(None)})
_CONTAINERS = (list, tuple, dict, set, frozenset, Namespace, KeysView, ValuesView, ItemsView)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox plus the bounds above; renders go through ``render_bounded``."""

    intercepted_binops = frozenset({"+", "*", "%", "**"})
    code_generator_class = _BoundedCodeGenerator

    def __init__(self, **options: Any) -> None:
        super().__init__(finalize=self._finalize, **options)
        self.filters = {name: _bounded_filter(name, f) for name, f in {**self.filters, "tojson": _tojson}.items()}
        self.globals.update(range=_range, lipsum=_lipsum, strftime_now=_strftime_now)

    @staticmethod
    def _finalize(value: Any) -> Any:
        # Before str() turns a huge list into text. Plain strings are counted as they
        # stream out, and str() of a huge integer is refused by Python itself.
        if type(value) not in _SCALARS and isinstance(value, _CONTAINERS):
            _ensure(text_size(value), "an output")
        return value

    @staticmethod
    def tandem_tick() -> bool:
        budget = getattr(_local, "budget", None)
        if budget is not None:
            budget.tick()
        return True  # also serves as the first operand of a loop filter's 'and'

    @staticmethod
    def tandem_concat(autoescape: bool, parts: tuple) -> str:
        _ensure(sum(len(part) if type(part) is str else text_size(part) for part in parts),
                "joining text with ~")
        return markup_join(parts) if autoescape else str_join(parts)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 — Jinja's signature
        _tick()
        args = _checked_call(__obj, args, kwargs)
        return _check_size(super().call(__context, __obj, *args, **kwargs))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "+" and type(left) is str and type(right) is str:  # the common case, kept quick
            _ensure(len(left) + len(right), "joining two values")
            return left + right
        _check_binop(operator, left, right)
        return _check_size(super().call_binop(context, operator, left, right))

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        template = value.__self__

        @functools.wraps(wrapped)
        def bounded(*args: Any, **kwargs: Any) -> str:
            _tick()
            _check_format_string(template)
            _ensure(len(template) + text_size((args, kwargs)), "format()")
            return _check_size(wrapped(*args, **kwargs))

        return bounded


@contextmanager
def stop_renders_on(cancel: Any) -> Iterator[None]:
    """Renders on this thread end (``RenderStopped``) once ``cancel`` (an Event) is set."""
    previous = getattr(_local, "cancel", None)
    _local.cancel = cancel
    try:
        yield
    finally:
        _local.cancel = previous


def render_bounded(template: jinja2.Template, context: dict[str, Any], *, output_chars: int,
                   seconds: float | None = None) -> str:
    """Render a template compiled by a ``BoundedEnvironment`` within the limits.

    Raises ``TemplateLimitError`` past a limit, ``RenderStopped`` when stopped, and
    whatever else the template raises (the caller turns all of it into one line)."""
    seconds = RENDER_SECONDS if seconds is None else seconds  # read now: tests may change it
    budget = _Budget(time.monotonic() + seconds, seconds, output_chars, getattr(_local, "cancel", None))
    previous, _local.budget = _budget(), budget
    try:
        parts, size = [], 0
        for chunk in template.generate(**context):
            size += len(chunk)
            if size > output_chars:
                raise TemplateLimitError(f"its output passed {output_chars:,} characters")
            parts.append(chunk)
        return "".join(parts)
    finally:
        _local.budget = previous
