"""A jinja2 sandbox bounded in time and size, for templates that come from model files.

jinja2's ``ImmutableSandboxedEnvironment`` stops a template from reaching Python internals but
not from running for hours (``{% for i in range(99999) %}{% for j in range(99999) %}``) or
building a gigabyte string (``{{ 'x' * 1000000000 }}``). ``BoundedSandbox`` adds budgets, each
checked before the work is done where it can be, and raises ``TemplateLimitError`` (a
BringupError, exit 2) naming the limit:

* steps: every attribute or item read, call, filter, operator, concatenation and loop iteration
  counts one (loops of every kind: each ``for`` iterable is wrapped by ``bounded_iter``);
* wall-clock time, checked at every step;
* size: a string, list or other sequence built by an operator, call, filter or concatenation, a
  repetition count or width argument, a ``range()`` and the whole rendered text are bounded.

The rewrite of ``for`` iterables and ``~`` concatenations is done on the parsed template with
jinja2's public node API (``Environment.parse``, ``NodeTransformer``, ``from_string`` of a node
tree), so the generated code of every other construct is jinja2's own.
"""
from __future__ import annotations

import functools
import re
import time
from collections.abc import Sequence
from typing import Any, Iterable, Iterator

import jinja2.sandbox
from jinja2 import nodes
from jinja2.visitor import NodeTransformer

from bringup.core.errors import BringupError

MAX_CHARS = 1 << 20       # longest string or sequence a template may build, and its whole output
MAX_RANGE = 10_000        # items of one range()
MAX_STEPS = 250_000       # sandbox operations per render (a chat template needs a few thousand)
TIMEOUT_S = 2.0           # wall-clock seconds per render (a chat template needs milliseconds)
_NUMBER = re.compile(r"\d+")


class TemplateLimitError(BringupError):
    """A template exceeded a step, time or size budget of ``BoundedSandbox``."""


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
    """Route every ``for`` iterable through ``bounded_iter`` and every ``~`` through ``bounded_concat``."""

    def visit_For(self, node: nodes.For) -> nodes.For:
        self.generic_visit(node)
        node.iter = nodes.Call(nodes.EnvironmentAttribute("bounded_iter"), [node.iter], [], None, None,
                               lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Call:
        self.generic_visit(node)
        return nodes.Call(nodes.EnvironmentAttribute("bounded_concat"), [nodes.List(node.nodes)], [], None, None,
                          lineno=node.lineno)


class BoundedSandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """ImmutableSandboxedEnvironment with the budgets of the module docstring.

    Use ``render(source, **context)``; one instance renders one template at a time.
    """

    intercepted_binops = frozenset(("+", "-", "*", "/", "//", "%", "**"))

    def __init__(self, **options: Any):
        super().__init__(finalize=self._finalize, **options)
        self.globals["range"] = self._range
        self.filters = {k: self._bounded(f, f"filter {k}") for k, f in self.filters.items()}
        self.tests = {k: self._bounded(f, f"test {k}") for k, f in self.tests.items()}
        self._steps, self._deadline = 0, float("inf")

    # -- budgets ----------------------------------------------------------------------------
    def step(self) -> None:
        self._steps += 1
        if self._steps > MAX_STEPS:
            raise TemplateLimitError(f"chat template exceeded {MAX_STEPS} operations (a runaway loop?)")
        if time.monotonic() > self._deadline:
            raise TemplateLimitError(f"chat template ran longer than {TIMEOUT_S:g} s")

    @staticmethod
    def sized(value: Any, what: str) -> Any:
        if isinstance(value, (str, bytes, list, tuple, dict, Sequence)) and len(value) > MAX_CHARS:
            raise TemplateLimitError(f"chat template built {what} of {len(value)} items; the limit is {MAX_CHARS}")
        return value

    def _args(self, args: Iterable[Any], what: str) -> None:
        for a in args:
            if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_CHARS:
                raise TemplateLimitError(f"chat template passed {a} to {what}; numbers above {MAX_CHARS} are refused")

    @staticmethod
    def _format_widths(fmt: Any, what: str) -> None:
        if isinstance(fmt, str) and any(int(m) > MAX_CHARS for m in _NUMBER.findall(fmt)):
            raise TemplateLimitError(f"chat template {what} names a width above {MAX_CHARS}")

    # -- hooks jinja2 calls ------------------------------------------------------------------
    def _bounded(self, f, what: str):
        @functools.wraps(f)   # keeps jinja2's pass_context / pass_environment marks
        def g(*args, **kwargs):
            self.step()
            self._args([*args, *kwargs.values()], what)
            if what == "filter format" and args:
                self._format_widths(args[0], "format string")
            return self.sized(f(*args, **kwargs), f"a value in {what}")
        return g

    def _range(self, *args: int) -> _Range:
        self.step()
        r = range(*args)
        if len(r) > MAX_RANGE:
            raise TemplateLimitError(f"chat template asked for range{args} of {len(r)} items; the limit is {MAX_RANGE}")
        return _Range(self, r)

    def _finalize(self, value: Any) -> Any:
        return self.sized(value, "an output value")

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
        return self.sized("".join(map(str, parts)), "a string with ~")

    def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
        self.step()
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > MAX_CHARS:
                    raise TemplateLimitError(f"chat template repeats a sequence of {len(seq)} items {n} times; "
                                             f"the limit is {MAX_CHARS} items")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and \
                abs(left) > 1 and right * max(left.bit_length(), 1) > 4096:
            raise TemplateLimitError(f"chat template computes {left} ** {right}; results above 4096 bits are refused")
        elif operator == "%":
            self._format_widths(left, "%-format string")
        return self.sized(super().call_binop(context, operator, left, right), f"the result of {operator!r}")

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja2's signature
        __self.step()
        __self._args([*args, *kwargs.values()], "a call")
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
        self._steps, self._deadline = 0, time.monotonic() + TIMEOUT_S
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
