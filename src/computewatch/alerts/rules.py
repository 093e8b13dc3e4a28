"""Alert rules: the YAML file, checked when loaded, and the built-in pack.

A file looks like this (docs/alerts.md has every key)::

    receivers: [terminal, "slack:https://hooks.slack.com/services/..."]
    disable: [GpuLowUtilization]          # built-in rules to leave out
    rules:
      - name: GpuHot
        expr: computewatch_gpu_temperature_celsius > 85
        for: 5m
        severity: warning
        labels: {team: infra}
        message: "GPU {labels.gpu_index} on {labels.node} at {value:.0f} C"

Every problem is a :class:`RulesError` naming the file, the line and the reason, found before
anything runs: a YAML syntax error, an unknown key, a condition that does not parse (with its
column), an unknown function or detector, a bad duration, a template field that does not exist.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from computewatch.alerts.detectors import DETECTORS, check_params
from computewatch.alerts.expr import (
    Condition,
    ExprError,
    format_duration,
    parse_condition,
    parse_duration,
)
from computewatch.alerts.notify import parse_target
from computewatch.errors import ComputewatchError

__all__ = [
    "SEVERITIES",
    "AlertsError",
    "Rule",
    "RuleSet",
    "RulesError",
    "builtin_rules",
    "load_rules",
    "parse_rules",
    "render",
]

SEVERITIES = ("info", "warning", "critical")
BUILTIN = "builtin.yaml"
_RULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FIELD = re.compile(r"labels\.[A-Za-z_][A-Za-z0-9_]*|value|name|severity|threshold|detail|for")
_RULE_KEYS = ("name", "expr", "detector", "params", "for", "severity", "labels", "message")
_RULE_KEYS_ALL = (*_RULE_KEYS, "description")
_TOP_KEYS = ("rules", "receivers", "builtin", "disable")


class AlertsError(ComputewatchError, ValueError):
    """A problem with alert settings the user can fix (rules file, targets, budgets)."""


class RulesError(AlertsError):
    """A rules file that cannot be used: ``file:line: reason``."""

    def __init__(self, where: str, line: int | None, reason: str) -> None:
        super().__init__(f"{where}:{line}: {reason}" if line else f"{where}: {reason}")
        self.where = where
        self.line = line
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Rule:
    """One alert rule: a condition (``expr``) or a built-in ``detector`` with its parameters."""

    name: str
    severity: str = "warning"
    for_seconds: float = 0.0
    labels: Mapping[str, str] = field(default_factory=dict)
    message: str = "{name}: {value}"
    description: str = ""
    expr: str | None = None
    condition: Condition | None = None
    detector: str | None = None
    params: Mapping[str, float] = field(default_factory=dict)
    origin: str = ""  # "FILE:LINE" or "built-in"


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The rules to evaluate and the notification targets the file declared."""

    rules: tuple[Rule, ...]
    receivers: tuple[str, ...] = ()
    path: str | None = None

    def names(self) -> list[str]:
        return [r.name for r in self.rules]

    def get(self, name: str) -> Rule | None:
        return next((r for r in self.rules if r.name == name), None)


# -- YAML with line numbers --------------------------------------------------------------------

MAX_DEPTH = 64
"""Nesting a rules file may use (it needs 5 levels); PyYAML composes nodes recursively, so a
deeper document would end in RecursionError instead of an error naming the line."""


class _Loader(yaml.SafeLoader):
    """The safe loader, refusing to compose nodes nested more than :data:`MAX_DEPTH` deep."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self._depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"nests more than {MAX_DEPTH} levels deep",
                self.peek_event().start_mark,  # type: ignore[no-untyped-call]
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


class _Doc:
    """Converts composed YAML nodes, failing with the line of the offending node."""

    def __init__(self, where: str) -> None:
        self.where = where
        self._loader = yaml.SafeLoader("")

    def fail(self, node: yaml.Node | None, reason: str) -> RulesError:
        return RulesError(self.where, _line(node) if node is not None else None, reason)

    def mapping(self, node: yaml.Node, what: str) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, f"{what} must be a mapping (key: value)")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for k, v in node.value:
            key = self.scalar(k)
            if not isinstance(key, str):
                raise self.fail(k, f"{what}: keys must be text, not {key!r}")
            if key in out:
                raise self.fail(k, f"{what}: duplicate key {key!r}")
            out[key] = (k, v)
        return out

    def sequence(self, node: yaml.Node, what: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, f"{what} must be a list")
        return list(node.value)

    def scalar(self, node: yaml.Node) -> object:
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, "expected a single value, not a list or mapping")
        try:
            return self._loader.construct_object(node, deep=True)
        except yaml.YAMLError as e:
            raise self.fail(node, f"bad value: {e}") from None

    def text(self, node: yaml.Node, what: str) -> str:
        v = self.scalar(node)
        if not isinstance(v, str) or not v.strip():
            raise self.fail(node, f"{what} must be non-empty text, not {v!r}")
        return v.strip()

    def keys(
        self, m: Mapping[str, tuple[yaml.Node, yaml.Node]], known: tuple[str, ...], what: str
    ) -> None:
        for key, (k, _) in m.items():
            if key not in known:
                raise self.fail(k, f"unknown key {key!r} in {what}; known: {', '.join(known)}")


def parse_rules(text: str, where: str = "<rules>", *, builtin: RuleSet | None = None) -> RuleSet:
    """Parse and check a rules document. With ``builtin``, its rules come first unless the file
    says ``builtin: false``; a file rule with a built-in's name replaces it."""
    doc = _Doc(where)
    try:
        root = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else None
        raise RulesError(where, line, f"not valid YAML: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise RulesError(where, None, f"not valid YAML: {e}") from None
    if root is None:
        raise RulesError(where, None, "the file is empty; expected a 'rules:' list")
    top = doc.mapping(root, "the file")
    doc.keys(top, _TOP_KEYS, "the file")
    use_builtin = True
    if "builtin" in top:
        node = top["builtin"][1]
        flag = doc.scalar(node)
        if not isinstance(flag, bool):
            raise doc.fail(node, "builtin must be true or false")
        use_builtin = flag
    base = list(builtin.rules) if builtin is not None and use_builtin else []
    if "disable" in top:
        for n in doc.sequence(top["disable"][1], "disable"):
            name = doc.text(n, "a rule name")
            if builtin is None or builtin.get(name) is None:
                known = ", ".join(builtin.names()) if builtin else "none"
                raise doc.fail(n, f"disable: no built-in rule {name!r}; built-in rules: {known}")
            base = [r for r in base if r.name != name]
    receivers: list[str] = []
    if "receivers" in top:
        for n in doc.sequence(top["receivers"][1], "receivers"):
            receivers.append(_receiver(doc, n))
    rules: list[Rule] = []
    seen: dict[str, int] = {}
    if "rules" in top:
        for n in doc.sequence(top["rules"][1], "rules"):
            rule = _rule(doc, n)
            if rule.name in seen:
                raise doc.fail(
                    n, f"rule {rule.name!r} is defined twice (first at line {seen[rule.name]})"
                )
            seen[rule.name] = _line(n)
            rules.append(rule)
    names = {r.name for r in rules}
    merged = [r for r in base if r.name not in names] + rules
    return RuleSet(tuple(merged), tuple(receivers), where)


def _receiver(doc: _Doc, node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        m = doc.mapping(node, "a receiver")
        doc.keys(m, ("type", "url"), "a receiver")
        if "type" not in m:
            raise doc.fail(node, "a receiver needs a type (webhook, slack, alertmanager, terminal)")
        kind = doc.text(m["type"][1], "type")
        spec = kind if "url" not in m else f"{kind}:{doc.text(m['url'][1], 'url')}"
    else:
        spec = doc.text(node, "a receiver")
    try:
        parse_target(spec)
    except ValueError as e:
        raise doc.fail(node, str(e)) from None
    return spec


def _rule(doc: _Doc, node: yaml.Node) -> Rule:
    m = doc.mapping(node, "a rule")
    doc.keys(m, _RULE_KEYS_ALL, "a rule")
    if "name" not in m:
        raise doc.fail(node, "a rule needs a name")
    name_node = m["name"][1]
    name = doc.text(name_node, "name")
    if not _RULE_NAME.fullmatch(name):
        raise doc.fail(name_node, f"rule name {name!r}: letters, digits and _ only (GpuMemoryHigh)")
    what = f"rule {name}"
    has_expr, has_det = "expr" in m, "detector" in m
    if has_expr == has_det:
        raise doc.fail(node, f"{what}: give exactly one of 'expr' (a condition) or 'detector'")
    fields: dict[str, object] = {"name": name}
    if has_expr:
        en = m["expr"][1]
        text = doc.text(en, "expr")
        try:
            fields["condition"] = parse_condition(text)
        except ExprError as e:
            raise doc.fail(
                en, f"{what}: expr column {e.column}: {e.reason} (in {text!r})"
            ) from None
        fields["expr"] = text
        if "params" in m:
            raise doc.fail(m["params"][0], f"{what}: params belong to a detector")
    else:
        dn = m["detector"][1]
        det = doc.text(dn, "detector")
        if det not in DETECTORS:
            raise doc.fail(dn, f"{what}: unknown detector {det!r}; known: {', '.join(DETECTORS)}")
        raw: dict[str, tuple[int, object]] = {}
        if "params" in m:
            for key, (kn, vn) in doc.mapping(m["params"][1], "params").items():
                raw[key] = (_line(kn), doc.scalar(vn))
        try:
            fields["params"] = check_params(det, {k: v for k, (_, v) in raw.items()})
        except ValueError as e:
            bad = str(e).split(":", 1)[0]
            line = raw[bad][0] if bad in raw else _line(dn)
            raise RulesError(doc.where, line, f"{what}: {e}") from None
        fields["detector"] = det
    if "for" in m:
        fn = m["for"][1]
        v = doc.scalar(fn)
        try:
            if not isinstance(v, str):
                raise ValueError(f"{v!r} is not a duration (examples: 30s, 5m, 1h30m, 2d)")
            fields["for_seconds"] = parse_duration(v)
        except ValueError as e:
            raise doc.fail(fn, f"{what}: for: {e}") from None
    if "severity" in m:
        sn = m["severity"][1]
        sev = doc.text(sn, "severity")
        if sev not in SEVERITIES:
            raise doc.fail(sn, f"{what}: severity {sev!r}; one of {', '.join(SEVERITIES)}")
        fields["severity"] = sev
    if "labels" in m:
        labels: dict[str, str] = {}
        for key, (kn, vn) in doc.mapping(m["labels"][1], "labels").items():
            if not _LABEL_NAME.fullmatch(key) or key.startswith("__"):
                raise doc.fail(kn, f"{what}: bad label name {key!r}")
            if key in ("alertname", "severity"):
                raise doc.fail(kn, f"{what}: label {key!r} is set from the rule itself")
            val = doc.scalar(vn)
            if isinstance(val, bool | dict | list) or val is None:
                raise doc.fail(vn, f"{what}: label {key} must be text or a number")
            labels[key] = str(val)
        fields["labels"] = labels
    for key in ("message", "description"):
        if key in m:
            tn = m[key][1]
            tmpl = doc.text(tn, key)
            try:
                check_template(tmpl)
            except ValueError as e:
                raise doc.fail(tn, f"{what}: {key}: {e}") from None
            fields[key] = tmpl
    fields["origin"] = f"{doc.where}:{_line(node)}"
    return Rule(**fields)  # type: ignore[arg-type]


def check_template(tmpl: str) -> None:
    """Raise ValueError unless every ``{field}`` of a message template is one we fill."""
    try:
        parts = list(string.Formatter().parse(tmpl))
    except ValueError as e:
        raise ValueError(f"bad template {tmpl!r}: {e}") from None
    for _, fname, spec, conv in parts:
        if fname is None:
            continue
        if not _FIELD.fullmatch(fname):
            raise ValueError(
                f"unknown field {{{fname}}}; use {{labels.NAME}}, {{value}}, {{threshold}}, "
                "{name}, {severity}, {for} or {detail}"
            )
        if spec and "{" in spec:
            raise ValueError(f"nested fields are not supported: {{{fname}:{spec}}}")
        if conv not in (None, "s", "r"):
            raise ValueError(f"bad conversion !{conv}")
    try:
        render(tmpl, {"gpu": "GPU-0"}, 0.5, name="Rule", severity="warning", threshold=1.0)
    except (ValueError, TypeError, IndexError, KeyError) as e:
        raise ValueError(f"{tmpl!r} cannot be filled with a number value: {e}") from None


class _LabelView:
    """``{labels.NAME}`` in templates: the label's value, empty when the series lacks it."""

    def __init__(self, labels: Mapping[str, str]) -> None:
        self._labels = labels

    def __getattr__(self, name: str) -> str:
        return self._labels.get(name, "")


def render(
    tmpl: str,
    labels: Mapping[str, str],
    value: float,
    *,
    name: str,
    severity: str,
    threshold: float | None = None,
    for_seconds: float = 0.0,
    detail: str = "",
) -> str:
    """Fill a message template (fields checked by :func:`check_template` when loaded)."""
    fields = {
        "labels": _LabelView(labels),
        "value": value,
        "name": name,
        "severity": severity,
        "threshold": threshold if threshold is not None else float("nan"),
        "for": format_duration(for_seconds),
        "detail": detail,
    }
    return tmpl.format(**fields)


def builtin_rules() -> RuleSet:
    """The built-in pack (``builtin.yaml`` in this package), checked like a user's file."""
    text = resources.files("computewatch.alerts").joinpath(BUILTIN).read_text(encoding="utf-8")
    return parse_rules(text, f"built-in {BUILTIN}")


def load_rules(path: str | Path, *, builtin: bool = True) -> RuleSet:
    """Read a rules file (with the built-in pack first unless ``builtin`` is false or the file
    says ``builtin: false``). Raises :class:`RulesError`: file, line and reason."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RulesError(str(p), None, "no such file") from None
    except IsADirectoryError:
        raise RulesError(str(p), None, "is a directory, not a rules file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise RulesError(
            str(p), None, f"cannot read: {getattr(e, 'strerror', None) or e}"
        ) from None
    return parse_rules(text, str(p), builtin=builtin_rules() if builtin else None)
