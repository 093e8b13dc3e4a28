"""The condition language of alert rules: a small, PromQL-shaped subset.

::

    condition  := comparison ("and" [on] comparison)*
    comparison := operand OP NUMBER                      OP: > >= < <= == !=
    operand    := term ["/" [on] term]
    term       := selector | FUNC "(" selector "[" DURATION "]" ")"
    selector   := NAME ["{" matcher ("," matcher)* "}"]  matcher: label = != =~ !~ "text"
    on         := "on" "(" label ("," label)* ")"
    FUNC       := rate | increase | avg_over_time | min_over_time | max_over_time

The semantics are Prometheus's where they overlap: ``/`` and ``and`` match series one-to-one on
identical label sets (or on the ``on(...)`` labels; ``/`` then keeps only those labels), a
comparison keeps the series for which it holds with the left-hand value, and ``rate`` handles
counter resets. Two differences, both documented in docs/alerts.md: ``rate`` and ``increase``
do not extrapolate to the window's edges, and a zero denominator drops the series instead of
giving ``+Inf``/``NaN``.
"""

from __future__ import annotations

import itertools
import math
import operator
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from computewatch.errors import ComputewatchError
from computewatch.metrics.model import MetricSample
from computewatch.readings import Labels  # a series' labels, sorted by name, without __name__
from computewatch.units import format_promql_duration

FUNCTIONS = ("rate", "increase", "avg_over_time", "min_over_time", "max_over_time")
COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}
_DURATION = re.compile(r"(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?")
_UNITS = (7 * 86400, 86400, 3600, 60, 1, 0.001)
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


class ExprError(ComputewatchError, ValueError):
    """A condition that does not parse; ``column`` is 1-based within the condition text."""

    def __init__(self, reason: str, column: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.column = column


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus duration (``30s``, ``5m``, ``1h30m``, ``2d``); ValueError if not."""
    m = _DURATION.fullmatch(text.strip())
    if not text.strip() or m is None or not any(m.groups()):
        raise ValueError(f"{text!r} is not a duration (examples: 30s, 5m, 1h30m, 2d)")
    # int * float overflows past ~1.8e308 seconds: a number no duration means
    try:
        seconds = float(sum(int(g) * u for g, u in zip(m.groups(), _UNITS, strict=True) if g))
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds):
        raise ValueError(f"{text!r} is too long a duration")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest Prometheus spelling of a whole number of seconds (``900`` -> ``15m``)."""
    return format_promql_duration(seconds)


# -- the syntax tree ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Matcher:
    label: str
    op: str  # = != =~ !~
    value: str
    pattern: re.Pattern[str] | None = None

    def matches(self, labels: Mapping[str, str]) -> bool:
        v = labels.get(self.label, "")
        if self.op == "=":
            return v == self.value
        if self.op == "!=":
            return v != self.value
        assert self.pattern is not None
        hit = self.pattern.fullmatch(v) is not None
        return hit if self.op == "=~" else not hit


@dataclass(frozen=True, slots=True)
class Selector:
    name: str
    matchers: tuple[Matcher, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(m.matches(labels) for m in self.matchers)


@dataclass(frozen=True, slots=True)
class Term:
    selector: Selector
    function: str | None = None  # one of FUNCTIONS, or None for the current value
    window: float = 0.0  # seconds, for a function


@dataclass(frozen=True, slots=True)
class Operand:
    left: Term
    right: Term | None = None  # left / right
    on: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Comparison:
    operand: Operand
    op: str
    threshold: float


@dataclass(frozen=True, slots=True)
class Condition:
    """A parsed condition: comparisons joined by ``and`` (each with its optional ``on``)."""

    first: Comparison
    rest: tuple[tuple[tuple[str, ...] | None, Comparison], ...] = ()

    def comparisons(self) -> Iterable[Comparison]:
        yield self.first
        for _, c in self.rest:
            yield c

    def terms(self) -> Iterable[Term]:
        for c in self.comparisons():
            yield c.operand.left
            if c.operand.right is not None:
                yield c.operand.right

    @property
    def max_window(self) -> float:
        return max((t.window for t in self.terms()), default=0.0)

    @property
    def threshold(self) -> float:
        return self.first.threshold


# -- the parser --------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<number>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![a-zA-Z_0-9.]))
    | (?P<duration>\d+[a-z][0-9a-z]*)
    | (?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)
    | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<op>=~|!~|>=|<=|==|!=|[<>=(){}\[\],/])
    )""",
    re.VERBOSE,
)


@dataclass
class _Tok:
    kind: str
    text: str
    col: int


def _tokenize(text: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.lastgroup is None:
            col = pos + len(text[pos:]) - len(text[pos:].lstrip()) + 1
            raise ExprError(f"unexpected character {text[col - 1]!r}", col)
        out.append(_Tok(m.lastgroup, m.group(m.lastgroup), m.start(m.lastgroup) + 1))
        pos = m.end()
    out.append(_Tok("end", "", len(text) + 1))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokenize(text)
        self.i = 0

    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def fail(self, expected: str) -> ExprError:
        t = self.tok
        got = "the end" if t.kind == "end" else repr(t.text)
        return ExprError(f"expected {expected}, found {got}", t.col)

    def take(self, kind: str, text: str | None = None) -> _Tok | None:
        t = self.tok
        if t.kind == kind and (text is None or t.text == text):
            self.i += 1
            return t
        return None

    def need(self, kind: str, text: str | None = None, what: str | None = None) -> _Tok:
        t = self.take(kind, text)
        if t is None:
            raise self.fail(what or repr(text) if text else what or kind)
        return t

    def condition(self) -> Condition:
        first = self.comparison()
        rest: list[tuple[tuple[str, ...] | None, Comparison]] = []
        while self.take("name", "and"):
            rest.append((self.on(), self.comparison()))
        if self.tok.kind != "end":
            raise self.fail("'and' or the end of the condition")
        return Condition(first, tuple(rest))

    def on(self) -> tuple[str, ...] | None:
        if not self.take("name", "on"):
            return None
        self.need("op", "(")
        labels = [self.need("name", what="a label name").text]
        while self.take("op", ","):
            labels.append(self.need("name", what="a label name").text)
        self.need("op", ")")
        return tuple(labels)

    def comparison(self) -> Comparison:
        operand = self.operand()
        t = self.tok
        if t.kind != "op" or t.text not in COMPARISONS:
            raise self.fail("a comparison (> >= < <= == !=) and a threshold")
        self.i += 1
        num = self.need("number", what="a number")
        value = float(num.text)
        if not math.isfinite(value):
            raise ExprError("the threshold must be a finite number", num.col)
        return Comparison(operand, t.text, value)

    def operand(self) -> Operand:
        left = self.term()
        if not self.take("op", "/"):
            return Operand(left)
        on = self.on()
        return Operand(left, self.term(), on)

    def term(self) -> Term:
        name = self.need("name", what="a metric name or a function")
        if self.take("op", "("):
            if name.text not in FUNCTIONS:
                raise ExprError(
                    f"unknown function {name.text!r}; known: {', '.join(FUNCTIONS)}", name.col
                )
            sel = self.selector(self.need("name", what="a metric name"))
            self.need("op", "[", what=f"'[' and a window: {name.text}(metric[5m])")
            d = self.need("duration", what="a window such as 5m")
            try:
                window = parse_duration(d.text)
            except ValueError as e:
                raise ExprError(str(e), d.col) from None
            if window <= 0:
                raise ExprError("the window must be longer than zero", d.col)
            self.need("op", "]")
            self.need("op", ")")
            return Term(sel, name.text, window)
        if name.text in FUNCTIONS:
            raise ExprError(f"{name.text} needs a range: {name.text}(metric[5m])", name.col)
        return Term(self.selector(name))

    def selector(self, name: _Tok) -> Selector:
        matchers: list[Matcher] = []
        if self.take("op", "{"):
            while not self.take("op", "}"):
                label = self.need("name", what="a label name or '}'")
                op = self.tok
                if op.kind != "op" or op.text not in ("=", "!=", "=~", "!~"):
                    raise self.fail("a label matcher (= != =~ !~)")
                self.i += 1
                s = self.need("string", what='a quoted value ("...")')
                value = _unquote(s.text[1:-1], s.col)
                pattern = None
                if op.text in ("=~", "!~"):
                    try:
                        pattern = re.compile(value)
                    except (re.error, OverflowError, RecursionError) as e:  # a{99999999999}
                        raise ExprError(f"bad regular expression {value!r}: {e}", s.col) from None
                matchers.append(Matcher(label.text, op.text, value, pattern))
                if not self.take("op", ","):
                    self.need("op", "}", what="',' or '}'")
                    break
        return Selector(name.text, tuple(matchers))


_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{3}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _unquote(body: str, col: int) -> str:
    """The text of a quoted string: PromQL's escapes, which are Go's (``\\n``, ``\\"``,
    ``\\xHH``, ``\\uHHHH``, ``\\UHHHHHHHH``, octal ``\\NNN``); any other is an error."""

    def one(m: re.Match[str]) -> str:
        esc = m.group(0)[1:]
        if esc in ("\\", '"', "'"):
            return esc
        if esc in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[esc]
        if len(esc) > 1:
            code = int(esc[1:], 16) if esc[0] in "xuU" else int(esc, 8)
            if code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF:
                return chr(code)
        raise ExprError(f"bad escape \\{esc} in a quoted value", col)

    return _ESCAPE.sub(one, body)


def parse_condition(text: str) -> Condition:
    """Parse a condition, raising :class:`ExprError` with the column of the problem."""
    if not text.strip():
        raise ExprError("the condition is empty", 1)
    return _Parser(text).condition()


# -- evaluation --------------------------------------------------------------------------------


def series_labels(labels: Labels) -> Labels:
    return tuple(sorted(labels))


class InstantSamples:
    """What a condition is evaluated over at one instant (PromQL's instant evaluation): that
    instant's exported samples by metric name, plus the history that range functions read."""

    def __init__(self, now: float, samples: Sequence[MetricSample], history: History) -> None:
        self.now = now
        self.history = history
        self.by_name: dict[str, list[tuple[Labels, float]]] = {}
        for s in samples:
            self.by_name.setdefault(s.name, []).append((series_labels(s.labels), s.value))

    def current(self, sel: Selector) -> dict[Labels, float]:
        out: dict[Labels, float] = {}
        for labels, value in self.by_name.get(sel.name, ()):
            if math.isfinite(value) and sel.matches(dict(labels)):
                out[labels] = value
        return out


@dataclass
class History:
    """Recent points of the series that range functions read, pruned to the longest window."""

    names: frozenset[str] = frozenset()
    keep: float = 0.0
    points: dict[tuple[str, Labels], deque[tuple[float, float]]] = field(default_factory=dict)

    def record(self, now: float, samples: Sequence[MetricSample]) -> None:
        if not self.names:
            return
        for s in samples:
            if s.name in self.names and math.isfinite(s.value):
                key = (s.name, series_labels(s.labels))
                dq = self.points.get(key)
                if dq is None:
                    dq = self.points[key] = deque()
                if dq and now <= dq[-1][0]:  # a clock step back: start this series again
                    dq.clear()
                dq.append((now, s.value))
        horizon = now - self.keep
        for key in list(self.points):
            dq = self.points[key]
            while dq and dq[0][0] < horizon:
                dq.popleft()
            if not dq:
                del self.points[key]


def _range(tick: InstantSamples, term: Term) -> dict[Labels, float]:
    out: dict[Labels, float] = {}
    start = tick.now - term.window
    for (name, labels), dq in tick.history.points.items():
        if name != term.selector.name or not term.selector.matches(dict(labels)):
            continue
        pts = [p for p in dq if p[0] >= start]
        if not pts:
            continue
        values = [v for _, v in pts]
        if term.function == "avg_over_time":
            out[labels] = sum(values) / len(values)
        elif term.function == "min_over_time":
            out[labels] = min(values)
        elif term.function == "max_over_time":
            out[labels] = max(values)
        else:  # rate, increase: a counter's growth, resets counted as restarts from zero
            if len(pts) < 2:
                continue
            grown = 0.0
            for prev, cur in itertools.pairwise(values):
                grown += cur - prev if cur >= prev else cur
            span = pts[-1][0] - pts[0][0]
            if term.function == "increase":
                out[labels] = grown
            elif span > 0:
                out[labels] = grown / span
    return out


def _term(tick: InstantSamples, term: Term) -> dict[Labels, float]:
    return tick.current(term.selector) if term.function is None else _range(tick, term)


def _key(labels: Labels, on: tuple[str, ...] | None) -> Labels:
    if on is None:
        return labels
    d = dict(labels)
    return tuple((k, d.get(k, "")) for k in sorted(on))


def _unique(series: dict[Labels, float], on: tuple[str, ...] | None) -> dict[Labels, float]:
    """Series by matching key, leaving out keys that more than one series share (ambiguous)."""
    out: dict[Labels, float] = {}
    seen: set[Labels] = set()
    for labels, v in series.items():
        k = _key(labels, on)
        if k in seen:
            out.pop(k, None)
            continue
        seen.add(k)
        out[k] = v
    return out


def _operand(tick: InstantSamples, op: Operand) -> dict[Labels, float]:
    left = _term(tick, op.left)
    if op.right is None:
        return left
    right = _unique(_term(tick, op.right), op.on)
    lefts = _unique(left, op.on)
    out: dict[Labels, float] = {}
    for k, lv in lefts.items():
        rv = right.get(k)
        if rv is None or rv == 0:
            continue
        out[tuple(x for x in k if x[1] != "") if op.on is not None else k] = lv / rv
    return out


def _comparison(tick: InstantSamples, c: Comparison) -> dict[Labels, float]:
    test = COMPARISONS[c.op]
    return {k: v for k, v in _operand(tick, c.operand).items() if test(v, c.threshold)}


def evaluate(cond: Condition, tick: InstantSamples) -> dict[Labels, float]:
    """The series for which the condition holds now, each with its first operand's value."""
    out = _comparison(tick, cond.first)
    for on, c in cond.rest:
        if not out:
            break
        right = {_key(k, on) for k in _comparison(tick, c)}
        out = {k: v for k, v in out.items() if _key(k, on) in right}
    return out


def range_names(cond: Condition) -> dict[str, float]:
    """Metric names that range functions read, with the longest window each needs."""
    out: dict[str, float] = {}
    for t in cond.terms():
        if t.function is not None:
            out[t.selector.name] = max(out.get(t.selector.name, 0.0), t.window)
    return out


def check_name(name: str) -> bool:
    return _NAME.fullmatch(name) is not None
