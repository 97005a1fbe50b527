"""A jinja2 sandbox bounded in time and size, for templates that come from model files.

jinja2's ``ImmutableSandboxedEnvironment`` stops a template from reaching Python internals but
not from running for hours (``{% for i in range(99999) %}{% for j in range(99999) %}``) or
building a gigabyte inside one operation (``{{ 'x' * 1000000000 }}``, ``{{ big|join(sep) }}``,
``{{ s|replace('', s) }}``, ``{{ s.expandtabs(99999) }}``). ``BoundedSandbox`` adds budgets and
raises ``TemplateLimitError`` (a BringupError, exit 2) naming the limit:

* steps: every attribute or item read, call, filter, operator, concatenation, output and loop
  iteration counts one (loops of every kind: each ``for`` iterable is wrapped by ``bounded_iter``);
* wall-clock time, checked at every step;
* size, checked BEFORE the allocation: every operation that can make a value larger than its
  inputs (``*`` and ``+`` of strings and lists, ``~``, ``%`` and ``str.format``, the filters
  ``join indent replace center format wordwrap truncate sum`` and the ``str`` methods ``join
  replace center ljust rjust zfill expandtabs format format_map translate``, ``lipsum``) has
  the size of its result computed from its arguments, and is refused when that exceeds
  MAX_CHARS. Every other result is measured after the call (its ``weight``: characters of
  strings plus items of containers, recursively); such a result is at most a small multiple
  of the values it came from (``tojson``: 6 characters per character), which are themselves
  bounded.
* output: all text written by ``{{ }}`` and template data, into the output or into the buffer
  of a ``{% set %}`` block, macro, ``{% filter %}`` or ``{% call %}`` body, is counted
  (MAX_EMIT), so a loop inside a macro cannot build a gigabyte before the macro returns; the
  rendered text itself is bounded by MAX_CHARS.

The rewrite of ``for`` iterables, ``~`` concatenations and outputs is done on the parsed
template with jinja2's public node API (``Environment.parse``, ``NodeTransformer``,
``from_string`` of a node tree), so the generated code of every other construct is jinja2's own.
"""
from __future__ import annotations

import functools
import inspect
import math
import re
import time
from collections.abc import Iterator as IteratorABC
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Iterable, Iterator

import jinja2.sandbox
from jinja2 import nodes
from jinja2.visitor import NodeTransformer

from bringup.core.errors import BringupError

MAX_CHARS = 1 << 20       # largest value (characters + items) a template may build, and its whole output
MAX_EMIT = 8 * MAX_CHARS  # characters written by all outputs of one render, into any buffer
MAX_INT_BITS = 4096       # largest integer a template may compute
MAX_RANGE = 10_000        # items of one range()
MAX_STEPS = 250_000       # sandbox operations per render (a chat template needs a few thousand)
TIMEOUT_S = 2.0           # wall-clock seconds per render (a chat template needs milliseconds)
_NUMBER = re.compile(r"\d+")


class TemplateLimitError(BringupError):
    """A template exceeded a step, time or size budget of ``BoundedSandbox``."""


def weight(value: Any, limit: int = MAX_CHARS) -> int:
    """Size of ``value`` in characters and items: a string's length, an integer's decimal digits,
    a container's items plus the weights of its items (recursively), 1 for anything else. Stops
    counting once above ``limit`` (the result is then some number > ``limit``). A sequence
    repeated n times weighs n times as much (what ``*`` is checked with)."""
    total, todo = 0, [value]
    while todo and total <= limit:
        v = todo.pop()
        if isinstance(v, (str, bytes)):
            total += len(v)
        elif isinstance(v, int) and not isinstance(v, bool):
            total += v.bit_length() // 3 + 1
        elif isinstance(v, Mapping):
            total += len(v)
            if total <= limit:
                todo.extend(v.keys())
                todo.extend(v.values())
        elif isinstance(v, (list, tuple, set, frozenset)):
            total += len(v)
            if total <= limit:
                todo.extend(v)
        elif isinstance(v, _Range):
            total += len(v)
        else:
            total += 1
    return total


def text_size(value: Any) -> int:
    """An upper bound of ``len(str(value))`` for a value whose weight is bounded (a container's
    ``str`` adds quotes, separators and escapes: at most 6 characters per unit of weight)."""
    return len(value) if isinstance(value, str) else 6 * weight(value, 1 << 62)


def format_size(fmt: Any, args: Iterable[Any]) -> int:
    """An upper bound of the length of ``fmt % args`` or ``fmt.format(*args)``: every ``%`` or
    ``{`` of ``fmt`` is taken to insert the largest argument, padded to the largest number that
    appears in ``fmt`` or among the arguments (a width, a precision or a ``*`` width)."""
    if not isinstance(fmt, str):
        return text_size(fmt)
    args = list(args)
    widths = [int(m) for m in _NUMBER.findall(fmt)] + \
             [abs(a) for a in args if isinstance(a, int) and not isinstance(a, bool)]
    per = max((text_size(a) for a in args), default=0) + max(widths, default=0)
    return len(fmt) + (fmt.count("%") + fmt.count("{")) * per


def _format_args(right: Any) -> list:
    """The values a ``%`` operator inserts: a tuple's items, a mapping's values, or ``right``."""
    if isinstance(right, tuple):
        return list(right)
    if isinstance(right, Mapping):
        return list(right.values())
    return [right]


def _joined(items: Sequence, sep: Any) -> int:
    return sum(text_size(x) for x in items) + max(len(items) - 1, 0) * text_size(sep)


def _replaced(s: Any, old: Any, new: Any, count: Any = None) -> int:
    s, old, new = str(s), str(old), str(new)
    n = s.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        n = min(n, count)
    return len(s) + n * len(new)


def _indented(s: Any, width: Any = 4, *_: Any) -> int:
    s = str(s)
    w = width if isinstance(width, int) else len(str(width))
    return len(s) + (s.count("\n") + 1) * max(w, 0)


def _padded(s: Any, width: Any = 0, *_: Any) -> int:
    return max(len(str(s)), width if isinstance(width, int) else 0)


def _wrapped(s: Any, width: Any = 79, _brk: Any = True, wrapstring: Any = None, *_: Any) -> int:
    s = str(s)
    return len(s) + (len(s) + 1) * len(str(wrapstring if wrapstring is not None else "\n"))


def _translated(s: str, table: Any) -> int:
    # str.translate looks every character up with table[ord(c)]: a mapping's values or a
    # sequence's items are what it can insert
    values = table.values() if isinstance(table, Mapping) else table if isinstance(table, Sequence) else ()
    most = max((text_size(v) for v in values), default=1)
    return len(s) * max(most, 1)


def _summed(iterable: Any, attribute: Any = None, start: Any = 0) -> int:
    if not isinstance(start, (int, float)):
        # sum() of lists copies the growing list at every item: quadratic time in one call
        raise TemplateLimitError("chat template sums with a non-number start value; only numbers are summed")
    return 0


# size of a filter's result from its (bound, defaults applied) arguments, before it runs
_FILTER_SIZE: dict[str, Callable[[dict], int]] = {
    "join": lambda a: _joined(a["value"], a["d"]),
    "indent": lambda a: _indented(a["s"], a["width"]),
    "replace": lambda a: _replaced(a["s"], a["old"], a["new"], a["count"]),
    "center": lambda a: _padded(a["value"], a["width"]),
    "format": lambda a: format_size(a["value"], [*a["args"], *a["kwargs"].values()]),
    "wordwrap": lambda a: _wrapped(a["s"], a["width"], True, a["wrapstring"]),
    "truncate": lambda a: len(str(a["s"])) + text_size(a["end"]),
    "sum": lambda a: _summed(a["iterable"], a["attribute"], a["start"]),
}

# size of a str method's result from the string and the call's arguments, before it runs
_STR_SIZE: dict[str, Callable[..., int]] = {
    "join": lambda s, items: _joined(items, s),
    "replace": lambda s, old, new, count=-1: _replaced(s, old, new, count),
    "center": _padded, "ljust": _padded, "rjust": _padded, "zfill": _padded,
    "expandtabs": lambda s, tabsize=8: len(s) + s.count("\t") * max(tabsize, 0),
    "format": lambda s, *args, **kw: format_size(s, [*args, *kw.values()]),
    "format_map": lambda s, m: format_size(s, list(m.values()) if isinstance(m, Mapping) else [m]),
    "translate": _translated,
}


class _Range(Sequence):
    """range() for templates: at most MAX_RANGE items, each iteration a step."""

    def __init__(self, env: "BoundedSandbox", r: range):
        self._env, self._r = env, r

    def __len__(self) -> int:
        return len(self._r)

    def __getitem__(self, i):
        return self._r[i]

    def __iter__(self) -> Iterator[int]:
        for v in self._r:
            self._env.step()
            yield v


class _Instrument(NodeTransformer):
    """Route every ``for`` iterable through ``bounded_iter``, every ``~`` through
    ``bounded_concat`` and every output (expression or template data) through ``bounded_out``."""

    @staticmethod
    def _call(name: str, args: list, lineno: int) -> nodes.Call:
        return nodes.Call(nodes.EnvironmentAttribute(name), args, [], None, None, lineno=lineno)

    def visit_For(self, node: nodes.For) -> nodes.For:
        self.generic_visit(node)
        node.iter = self._call("bounded_iter", [node.iter], node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Call:
        self.generic_visit(node)
        return self._call("bounded_concat", [nodes.List(node.nodes)], node.lineno)

    def visit_Output(self, node: nodes.Output) -> nodes.Output:
        self.generic_visit(node)
        node.nodes = [self._call("bounded_out", [n], n.lineno or node.lineno) for n in node.nodes]
        return node


class BoundedSandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """ImmutableSandboxedEnvironment with the budgets of the module docstring.

    Use ``render(source, **context)``; one instance renders one template at a time.
    """

    intercepted_binops = frozenset(("+", "-", "*", "/", "//", "%", "**"))

    def __init__(self, **options: Any):
        super().__init__(finalize=self._finalize, **options)
        self.globals["range"] = self._range
        self.globals["lipsum"] = self._lipsum(self.globals["lipsum"])
        self.filters = {k: self._bounded(f, f"filter {k}", _FILTER_SIZE.get(k)) for k, f in self.filters.items()}
        self.tests = {k: self._bounded(f, f"test {k}") for k, f in self.tests.items()}
        self._steps, self._emitted, self._deadline = 0, 0, float("inf")

    # -- budgets ----------------------------------------------------------------------------
    def step(self) -> None:
        self._steps += 1
        if self._steps > MAX_STEPS:
            raise TemplateLimitError(f"chat template exceeded {MAX_STEPS} operations (a runaway loop?)")
        if time.monotonic() > self._deadline:
            raise TemplateLimitError(f"chat template ran longer than {TIMEOUT_S:g} s")

    @staticmethod
    def sized(value: Any, what: str) -> Any:
        """``value``, unless its weight is above MAX_CHARS (TemplateLimitError)."""
        if weight(value) > MAX_CHARS:
            raise TemplateLimitError(f"chat template built {what} larger than {MAX_CHARS} characters and items")
        return value

    @staticmethod
    def will_build(size: int, what: str) -> None:
        """Refuse an operation whose result, computed from its arguments, would be above MAX_CHARS."""
        if size > MAX_CHARS:
            raise TemplateLimitError(f"chat template would build {what} of {size} characters and items; "
                                     f"the limit is {MAX_CHARS}")

    def _args(self, args: Iterable[Any], what: str) -> None:
        for a in args:
            if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_CHARS:
                raise TemplateLimitError(f"chat template passed {a} to {what}; numbers above {MAX_CHARS} are refused")

    @staticmethod
    def _format_widths(fmt: Any, what: str) -> None:
        if isinstance(fmt, str) and any(int(m) > MAX_CHARS for m in _NUMBER.findall(fmt)):
            raise TemplateLimitError(f"chat template {what} names a width above {MAX_CHARS}")

    def _concrete(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Arguments with every iterator (a ``map`` or ``select`` result) read into a list, so that
        sizes can be computed before the call; each item read is a step."""
        def conc(v):
            if isinstance(v, IteratorABC) and not isinstance(v, (str, Sequence, Mapping)):
                items = []
                for x in v:
                    self.step()
                    items.append(x)
                    if len(items) > MAX_CHARS:
                        raise TemplateLimitError(f"chat template iterated over more than {MAX_CHARS} items")
                return items
            return v
        return tuple(conc(a) for a in args), {k: conc(v) for k, v in kwargs.items()}

    # -- hooks jinja2 calls ------------------------------------------------------------------
    def _bounded(self, f, what: str, size_of: Callable[[dict], int] | None = None):
        sig = inspect.signature(f) if size_of else None

        @functools.wraps(f)   # keeps jinja2's pass_context / pass_environment marks
        def g(*args, **kwargs):
            self.step()
            args, kwargs = self._concrete(args, kwargs)
            self._args([*args, *kwargs.values()], what)
            if what == "filter format" and args:
                self._format_widths(args[0], "format string")
            if sig is not None:
                bound = sig.bind(*args, **kwargs)
                bound.apply_defaults()
                self.will_build(size_of(bound.arguments), f"a value in {what}")
            return self.sized(f(*args, **kwargs), f"a value in {what}")
        return g

    def _lipsum(self, f):
        def lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:  # noqa: A002 - jinja2's names
            self.will_build(n * max * 16, "lipsum text")   # words of at most 15 letters and a space
            return f(n, html, min, max)
        return lipsum

    def _range(self, *args: int) -> _Range:
        self.step()
        r = range(*args)
        if len(r) > MAX_RANGE:
            raise TemplateLimitError(f"chat template asked for range{args} of {len(r)} items; the limit is {MAX_RANGE}")
        return _Range(self, r)

    def _finalize(self, value: Any) -> Any:
        return self.sized(value, "an output value")

    def bounded_out(self, value: Any) -> str:
        """The text one output writes (jinja2 writes ``str`` of it), counted against MAX_EMIT."""
        self.step()
        text = value if isinstance(value, str) else str(self.sized(value, "an output value"))
        self._emitted += len(text)
        if self._emitted > MAX_EMIT:
            raise TemplateLimitError(f"chat template wrote more than {MAX_EMIT} characters "
                                     "(output, blocks and macros together)")
        return text

    def bounded_iter(self, it: Any) -> Iterator[Any]:
        if not isinstance(it, _Range):
            self.sized(it, "a loop sequence")

        def gen():
            for v in it:
                self.step()
                yield v
        return gen()

    def bounded_concat(self, parts: list) -> str:
        self.step()
        self.will_build(sum(text_size(p) for p in parts), "a string with ~")
        return "".join(map(str, parts))

    def _binop_size(self, operator: str, left: Any, right: Any) -> None:
        """Refuse a binary operation whose result would pass a budget, before it runs."""
        ints = all(isinstance(x, int) for x in (left, right))
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                    kind = "string of" if isinstance(seq, str) else "list of weight"
                    w = weight(seq, 1 << 62)
                    self.will_build(w * max(n, 0), f"a {kind} {w} repeated {n} times")
            if ints and left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise TemplateLimitError(f"chat template multiplies integers into more than {MAX_INT_BITS} bits")
        elif operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
            self.will_build(weight(left, 1 << 62) + weight(right, 1 << 62), "the result of '+'")
        elif operator == "**" and ints and abs(left) > 1 and right * math.log2(abs(left)) > MAX_INT_BITS:
            raise TemplateLimitError(f"chat template computes {left} ** {right}; results above "
                                     f"{MAX_INT_BITS} bits are refused")
        elif operator == "%" and isinstance(left, str):
            self._format_widths(left, "%-format string")
            self.will_build(format_size(left, _format_args(right)), "a %-formatted string")

    def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
        self.step()
        self._binop_size(operator, left, right)
        return self.sized(super().call_binop(context, operator, left, right), f"the result of {operator!r}")

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja2's signature
        __self.step()
        args, kwargs = __self._concrete(args, kwargs)
        __self._args([*args, *kwargs.values()], "a call")
        # the sandbox hands out str.format wrapped (SandboxedEnvironment.wrap_str_format)
        method = getattr(__obj, "__wrapped__", __obj)
        owner, name = getattr(method, "__self__", None), getattr(method, "__name__", "")
        if isinstance(owner, str) and name in _STR_SIZE:
            try:
                size = _STR_SIZE[name](owner, *args, **kwargs)
            except TypeError:
                size = 0   # wrong arguments: the call itself raises jinja2's own error
            __self.will_build(size, f"a value in str.{name}")
        return __self.sized(super().call(__context, __obj, *args, **kwargs), "a call result")

    def getattr(self, obj: Any, attribute: str) -> Any:
        self.step()
        if isinstance(obj, str) and attribute in ("format", "format_map"):
            self._format_widths(obj, "format string")
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        self.step()
        return super().getitem(obj, argument)

    # -- entry point ---------------------------------------------------------------------------
    def render(self, source: str, **context: Any) -> str:
        """Render ``source`` with ``context`` under the budgets; returns the text. Raises
        TemplateLimitError for a budget, and whatever jinja2 raises for a bad template."""
        self.sized(source, "a template source")
        tree = _Instrument().visit(self.parse(source))
        tmpl = self.from_string(tree)
        self._steps, self._emitted, self._deadline = 0, 0, time.monotonic() + TIMEOUT_S
        out, total = [], 0
        try:
            for piece in tmpl.generate(**context):
                total += len(piece)
                if total > MAX_CHARS:
                    raise TemplateLimitError(f"chat template output exceeded {MAX_CHARS} characters")
                out.append(piece)
        finally:
            self._deadline = float("inf")
        return "".join(out)
