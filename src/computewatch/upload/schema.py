"""The upload protocol as Pydantic models: the one statement of what ``POST /api/v1/runs``
accepts. The server validates a batch with :func:`validate_batch` and describes it in its OpenAPI
document with :func:`batch_json_schema`; the tests check what the client builds against the
same models. The typed records of :mod:`computewatch.upload.protocol` carry the same fields
through the code (a test checks that both name the same fields).

Pydantic comes with the ``server`` extra. The client (``computewatch push``, the live uploader)
builds the typed records and never imports this module, so a machine that only uploads needs no
Pydantic; only what validates (the server, the tests) does.

Beyond each field's type, a batch is refused when a run's ``status`` is not one of
:data:`~computewatch.upload.protocol.RUN_STATUSES`; ``started_at`` or ``ended_at`` is before
:data:`~computewatch.upload.protocol.EARLIEST_TIME` or more than
:data:`~computewatch.upload.protocol.FUTURE_SLACK_SECONDS` past the server's clock; ``ended_at``
is before ``started_at``; a number is not finite; a string holds a NUL character or a lone
surrogate (no database keeps those); a document nests deeper than
:data:`~computewatch.upload.protocol.MAX_DOC_DEPTH`; or a limit of the protocol is passed.
Fields the model does not know are ignored (additive fields within a protocol version).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Final, Literal, NotRequired, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    with_config,
)
from pydantic_core import ErrorDetails
from typing_extensions import TypedDict

from computewatch.errors import ComputewatchError
from computewatch.ledger.reports import shape_problem
from computewatch.upload.protocol import (
    EARLIEST_TIME,
    FUTURE_SLACK_SECONDS,
    MAX_DOC_DEPTH,
    MAX_MAGNITUDE,
    MAX_POINTS,
    MAX_RUNS_PER_BATCH,
    MAX_SERIES_PER_RUN,
    RUN_ID_PATTERN,
    IngestBatch,
    RunStatus,
    RunUpload,
    SeriesKind,
    SignedReport,
)

__all__ = [
    "BatchModel",
    "InvalidBatch",
    "RunModel",
    "SeriesModel",
    "batch_json_schema",
    "validate_batch",
    "validate_batch_json",
]

MAX_INT: Final = 2**63 - 1
"""The largest ``seq`` (a signed 64-bit column)."""
MAX_BUCKET_SECONDS: Final = 1e9


class InvalidBatch(ComputewatchError):
    """A batch the protocol does not allow; the message names the first bad field
    (``runs[2].status: expected one of 'running', ...``)."""


# -- field types ----------------------------------------------------------------------------------


def _text_problem(value: str) -> str | None:
    if "\x00" in value:
        return "a string holds a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "a string holds a lone surrogate (not UTF-8)"
    return None


def _storable(value: str) -> str:
    problem = _text_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _at(where: str, problem: str) -> str:
    return f"{where}: {problem}" if where else problem


def _doc_problem(value: object, where: str = "", depth: int = 0) -> str | None:
    """Why a JSON document cannot be stored as it is (None when it can), after the path of the
    bad value inside it (``.gpus[0].name: ...``): a string with a NUL or a lone surrogate, a
    number that is not finite, nesting deeper than MAX_DOC_DEPTH."""
    if depth > MAX_DOC_DEPTH:
        return _at(where, f"nested deeper than {MAX_DOC_DEPTH} levels")
    if isinstance(value, str):
        problem = _text_problem(value)
        return None if problem is None else _at(where, problem)
    if isinstance(value, float) and not math.isfinite(value):
        return _at(where, f"{value} is not a finite number")
    if isinstance(value, Mapping):
        for k, v in value.items():
            key = str(k)
            problem = _text_problem(key)
            if problem is not None:
                return _at(where, f"a key {key!r}: {problem}")
            inner = f"{where}.{key}" if len(where) < 200 else where
            found = _doc_problem(v, inner, depth + 1)
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            inner = f"{where}[{i}]" if len(where) < 200 else where
            found = _doc_problem(v, inner, depth + 1)
            if found is not None:
                return found
    return None


def _document(value: dict[str, Any]) -> dict[str, Any]:
    problem = _doc_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _signed_report(value: dict[str, Any]) -> dict[str, Any]:
    problem = _doc_problem(value) or shape_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _plausible_time(value: float) -> float:
    if value < EARLIEST_TIME:
        raise ValueError(f"{value} is before 2000-01-01: not a plausible Unix time")
    if value > time.time() + FUTURE_SLACK_SECONDS:
        raise ValueError(f"{value} is more than a day ahead of the server's clock")
    return value


def _text(max_length: int, min_length: int = 0) -> StringConstraints:
    return StringConstraints(min_length=min_length, max_length=max_length)


Storable = AfterValidator(_storable)
Name = Annotated[str, _text(500), Storable]
Host = Annotated[str, _text(255), Storable]
Who = Annotated[str, _text(200), Storable]
Arg = Annotated[str, Storable]
MapKey = Annotated[str, _text(200, min_length=1), Storable]
MapValue = Annotated[str, _text(1000), Storable]
StringMap = Annotated[
    dict[MapKey, MapValue],
    Field(max_length=200, description="string to string: keys 1-200 characters, values 1000"),
]
Document = Annotated[dict[str, Any], AfterValidator(_document)]
Time = Annotated[
    float,
    Field(
        allow_inf_nan=False,
        json_schema_extra={"minimum": EARLIEST_TIME},
        description="Unix seconds, from 2000-01-01 to a day past the server's clock",
    ),
    AfterValidator(_plausible_time),
]
Value = Annotated[float, Field(allow_inf_nan=False, gt=-MAX_MAGNITUDE, lt=MAX_MAGNITUDE)]
Point = Annotated[list[Value], Field(min_length=4, max_length=4)]


class SignedReportModel(BaseModel):
    """What a signed usage report looks like (computewatch.ledger.reports.SIGNED_FIELDS, every
    field required, no other). Its description only: a report is checked by
    ``ledger.reports.shape_problem`` and kept exactly as it arrived, since the signature covers
    its values as sent (an ``int`` stays an ``int``)."""

    model_config = ConfigDict(extra="forbid")

    run_id: Annotated[str, _text(64, min_length=1)]
    seq: Annotated[int, Field(ge=1)]
    final: bool
    status: Annotated[str, _text(32)]
    exit_code: int | None
    started_at: float
    ended_at: float | None
    summary_sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    meta_sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    figures: dict[str, Any] | None = Field(
        default=None,
        description="the run's figures as its ledger entry holds them (model, base_model, "
        "stage, flops by method, gpu_hours, energy_kwh, duration_seconds, devices); absent in "
        "reports of the first format",
    )
    signed_by: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{16}$")]
    signature: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9+/]{1,200}={0,2}$")]


SignedReportDoc = Annotated[
    dict[str, Any],
    AfterValidator(_signed_report),
    WithJsonSchema(SignedReportModel.model_json_schema()),
]


# -- models ---------------------------------------------------------------------------------------

_CONFIG = ConfigDict(strict=True, extra="ignore")
"""Strict: ``"5"`` is no number and ``1`` no boolean. Unknown fields are ignored (additive)."""


@with_config(_CONFIG)
class SeriesModel(TypedDict):
    """One series downsampled to at most MAX_POINTS buckets ``[t, min, mean, max]``. A typed
    dictionary, not a model: a run carries a hundred series or more, and validated as
    dictionaries they cost two thirds of what model objects did (then turned back into
    dictionaries)."""

    name: Who
    labels: StringMap
    bucket_seconds: Annotated[
        float,
        Field(
            allow_inf_nan=False,
            ge=0,
            lt=MAX_BUCKET_SECONDS,
            description="width of each bucket; 0 when the points are the raw samples",
        ),
    ]
    points: Annotated[list[Point], Field(max_length=MAX_POINTS)]
    kind: NotRequired[
        Annotated[
            SeriesKind,
            Field(description="gauge (when absent): as sampled; rate: a counter's per-second rate"),
        ]
    ]


class RunModel(BaseModel):
    """A run's whole current state (computewatch.upload.protocol.RunUpload)."""

    model_config = _CONFIG

    id: Annotated[str, StringConstraints(max_length=64, pattern=RUN_ID_PATTERN)]
    seq: Annotated[int, Field(ge=1, le=MAX_INT)] = Field(
        description="upload number of this run, from 1, growing; the server keeps the highest"
    )
    final: bool
    name: Name | None
    status: RunStatus
    exit_code: Annotated[int, Field(ge=-(2**31), le=2**31 - 1)] | None
    started_at: Time
    ended_at: Time | None = Field(description="not before started_at; null while running")
    host: Host
    user: Who
    project: Who | None
    tags: StringMap
    command: list[Arg]
    summary: Document | None
    meta: Document
    series: Annotated[list[SeriesModel], Field(max_length=MAX_SERIES_PER_RUN)]
    signed_report: SignedReportDoc | None = None
    series_base: Annotated[int, Field(ge=1, le=MAX_INT)] | None = Field(
        default=None,
        description="null: series replace the run's; a seq: series continue that upload (the "
        "run's latest on the server) from each series' first point on",
    )

    @field_validator("series_base")
    @classmethod
    def _base_before(cls, base: int | None, info: ValidationInfo) -> int | None:
        seq = info.data.get("seq")
        if base is not None and isinstance(seq, int) and base >= seq:
            raise ValueError(f"{base} is not before seq ({seq})")
        return base

    @field_validator("ended_at")
    @classmethod
    def _ends_after_start(cls, ended: float | None, info: ValidationInfo) -> float | None:
        started = info.data.get("started_at")
        if ended is not None and isinstance(started, float) and ended < started:
            raise ValueError(f"{ended} is before started_at ({started})")
        return ended

    def to_upload(self) -> RunUpload:
        upload: RunUpload = {
            "id": self.id,
            "seq": self.seq,
            "final": self.final,
            "name": self.name,
            "status": self.status,
            "exit_code": self.exit_code,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "host": self.host,
            "user": self.user,
            "project": self.project,
            "tags": self.tags,
            "command": self.command,
            "summary": self.summary,
            "meta": self.meta,
            "series": self.series,
        }
        if self.signed_report is not None:
            upload["signed_report"] = cast(SignedReport, self.signed_report)
        if self.series_base is not None:
            upload["series_base"] = self.series_base
        return upload


class BatchModel(BaseModel):
    """The body of ``POST /api/v1/runs`` (computewatch.upload.protocol.IngestBatch)."""

    model_config = _CONFIG

    protocol: Literal[1]
    runs: Annotated[list[RunModel], Field(max_length=MAX_RUNS_PER_BATCH)]

    def to_batch(self) -> IngestBatch:
        return {"protocol": self.protocol, "runs": [r.to_upload() for r in self.runs]}


# -- validating -----------------------------------------------------------------------------------


def _where(loc: Sequence[int | str]) -> str:
    out = ""
    for i, part in enumerate(loc):
        if part == "[key]":
            continue
        if i + 1 < len(loc) and loc[i + 1] == "[key]":
            out += f" (the key {part!r})"
        elif isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "body"


_KIND: Final = {
    "missing": "missing",
    "string_type": "expected a string",
    "string_unicode": "a string holds a lone surrogate (not UTF-8)",
    "int_type": "expected a whole number",
    "float_type": "expected a number",
    "bool_type": "expected true or false",
    "list_type": "expected a list",
    "dict_type": "expected an object",
    "model_type": "expected an object",
    "finite_number": "expected a finite number",
}


_BOUNDS: Final = {
    "greater_than": "more than",
    "greater_than_equal": "at least",
    "less_than": "less than",
    "less_than_equal": "at most",
}


def _message(error: ErrorDetails) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind in _KIND:
        said = _KIND[kind]
        if kind.endswith("_type") and error["input"] is None:
            said += " (null is not allowed here)"
    elif kind == "value_error":
        said = str(ctx.get("error", error["msg"]))
    elif kind == "literal_error":
        said = f"expected one of {ctx.get('expected')}, not {error['input']!r}"[:300]
    elif kind in _BOUNDS:
        bound = next(iter(ctx.values()), None)
        shown = f"{bound:g}" if isinstance(bound, float) else str(bound)
        said = f"out of range (expected {_BOUNDS[kind]} {shown})"
    elif kind == "string_too_long":
        said = f"longer than {ctx.get('max_length')} characters"
    elif kind == "string_too_short":
        said = "empty" if ctx.get("min_length") == 1 else error["msg"]
    elif kind == "too_long":
        said = f"more than {ctx.get('max_length')} items"
    elif kind == "too_short":
        said = f"fewer than {ctx.get('min_length')} items"
    elif kind == "string_pattern_mismatch":
        said = f"does not match {ctx.get('pattern')}"
    else:
        said = error["msg"]
    where = _where(error["loc"])
    # a path inside a document (_doc_problem) goes on the field's
    text = f"{where}{said}" if said.startswith((".", "[")) else f"{where}: {said}"
    # the names in it came in the body: no lone surrogate goes back out, and not too much
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:1000]


_BATCH: Final = TypeAdapter(BatchModel)


def validate_batch(doc: object) -> IngestBatch:
    """``doc`` (a parsed JSON body) as a batch. Raises :class:`InvalidBatch` naming the first
    bad field."""
    try:
        model = _BATCH.validate_python(doc)
    except ValidationError as e:
        raise InvalidBatch(_message(e.errors()[0])) from None
    return model.to_batch()


def validate_batch_json(body: bytes) -> IngestBatch | None:
    """``body`` (JSON text) as a batch when it is a valid one, decoded and validated in one
    pass by Pydantic's own parser (no Python object made for what the models drop); None when
    it is not, with no reason given: read it with ``jsonout.loads`` and :func:`validate_batch`
    then, whose messages name the fault (the server's ``parse_batch``)."""
    try:
        return _BATCH.validate_json(body).to_batch()
    except (ValidationError, ValueError):
        return None


def _inline(node: Any, defs: Mapping[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return {**_inline(defs[ref.removeprefix("#/$defs/")], defs), **rest}
        return {k: _inline(v, defs) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def batch_json_schema() -> dict[str, Any]:
    """The JSON schema of a batch with every definition in place (no ``$ref``): it stands
    alone inside an OpenAPI operation."""
    schema = BatchModel.model_json_schema()
    inlined: dict[str, Any] = _inline(schema, schema.get("$defs", {}))
    return inlined
