"""Model cards and papers: the compute of a model's training (one run or several) as the
Hugging Face model card's ``co2_eq_emissions`` block, a Markdown section, or a LaTeX paragraph
a paper can cite.

The Hugging Face block follows the model card specification
(https://huggingface.co/docs/hub/model-cards-co2): ``emissions`` in grams of CO2e, ``source``,
``training_type``, ``geographical_location``, ``hardware_used``. Every figure is the sum of
the runs' stored accounting, with its method and low-high range; a run without the figure is
named, never counted as zero.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from computewatch._version import __version__
from computewatch.analysis.summary_types import RunSummary, energy_components
from computewatch.units import format_duration, format_grams, format_kwh, format_usd

__all__ = ["FORMATS", "CardData", "Total", "card_data", "merge_card", "render_card"]

FORMATS = ("huggingface", "markdown", "latex")
TRAINING_TYPES = ("pre-training", "fine-tuning")


@dataclass(slots=True)
class Total:
    """A summed figure: value and range, the methods behind it, and the runs that lacked it."""

    value: float = 0.0
    low: float = 0.0
    high: float = 0.0
    methods: set[str] = field(default_factory=set)
    missing: list[str] = field(default_factory=list)

    def add(self, run_id: str, fig: object) -> None:
        if not isinstance(fig, dict) or fig.get("value") is None:
            self.missing.append(run_id)
            return
        v = float(fig["value"])
        self.value += v
        self.low += float(fig["low"]) if fig.get("low") is not None else v
        self.high += float(fig["high"]) if fig.get("high") is not None else v
        if fig.get("method"):
            self.methods.add(str(fig["method"]))

    @property
    def known(self) -> bool:
        return bool(self.methods) or (self.value > 0 and not self.missing)

    @property
    def method(self) -> str:
        return " + ".join(sorted(self.methods)) or "n/a"


@dataclass(slots=True)
class CardData:
    """What a card says about the runs that trained a model."""

    run_ids: list[str]
    energy_kwh: Total
    co2e_grams: Total
    cost_usd: Total
    wall_seconds: float
    gpu_seconds: float
    hardware: list[str]
    locations: list[str]
    intensity_sources: list[str]
    energy_notes: list[str]
    training_type: str


def _hardware(summary: RunSummary) -> list[str]:
    names: Counter[str] = Counter()
    for g in summary.get("gpus") or []:
        names[str(g.get("name") or g.get("model") or "GPU")] += 1
    out = [f"{n} x {name}" for name, n in sorted(names.items())]
    cpu = (summary.get("host") or {}).get("cpu_model")
    if cpu:
        out.append(f"CPU {cpu}")
    return out


def card_data(summaries: Sequence[RunSummary], training_type: str = "pre-training") -> CardData:
    """Sum the runs' accounting (each figure with its methods and range)."""
    energy, carbon, cost = Total(), Total(), Total()
    wall = gpu = 0.0
    hardware: list[str] = []
    locations: list[str] = []
    sources: list[str] = []
    notes: list[str] = []
    for s in summaries:
        rid = s["id"]
        en, co, cs = s.get("energy"), s.get("carbon"), s.get("cost")
        energy.add(rid, en["facility"] if en else None)
        carbon.add(rid, co["total"] if co else None)
        cost.add(rid, cs["total"] if cs else None)
        d = float(s.get("duration_seconds") or 0.0)
        wall += d
        gpu += d * len(s.get("gpus") or [])
        for h in _hardware(s):
            if h not in hardware:
                hardware.append(h)
        if co:
            i = co["intensity"]
            where = f"{i['name']} ({i['region']})"
            if where not in locations:
                locations.append(where)
            src = f"{i['source']}, {i['g_per_kwh']:g} gCO2e/kWh"
            if src not in sources:
                sources.append(src)
        if en:
            for name, comp in energy_components(en):
                line = f"{name} {comp['method']}"
                if line not in notes:
                    notes.append(line)
            line = f"PUE {en['pue']['value']:g} ({en['pue']['source']})"
            if line not in notes:
                notes.append(line)
    return CardData(
        run_ids=[s["id"] for s in summaries],
        energy_kwh=energy,
        co2e_grams=carbon,
        cost_usd=cost,
        wall_seconds=wall,
        gpu_seconds=gpu,
        hardware=hardware,
        locations=locations,
        intensity_sources=sources,
        energy_notes=notes,
        training_type=training_type,
    )


def _num(x: float, digits: int = 4) -> float:
    """A figure rounded to ``digits`` significant digits (what the card can honestly claim)."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def _source(d: CardData) -> str:
    return (
        f"computewatch {__version__}: facility energy ({d.energy_kwh.method}) x grid intensity "
        f"({'; '.join(d.intensity_sources) or 'unknown'}); carbon {d.co2e_grams.method}"
    )


def _yaml_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


def huggingface(d: CardData) -> str:
    """The model card's YAML front matter with the ``co2_eq_emissions`` block."""
    lines = ["---", "co2_eq_emissions:"]
    if d.co2e_grams.known and not d.co2e_grams.missing:
        lines.append(f"  emissions: {_num(d.co2e_grams.value)}")
    lines += [
        f"  source: {_yaml_str(_source(d))}",
        f"  training_type: {_yaml_str(d.training_type)}",
        f"  geographical_location: {_yaml_str('; '.join(d.locations) or 'unknown')}",
        f"  hardware_used: {_yaml_str(', '.join(d.hardware) or 'unknown')}",
        "---",
        "",
    ]
    return "\n".join(lines) + paragraph(d) + "\n"


def merge_card(existing: str, new_card: str) -> str:
    """``existing`` (a model card: YAML front matter between ``---`` lines, then prose) with the
    ``co2_eq_emissions`` block of ``new_card`` in its front matter, in place of the one there or
    at its end; every other line is kept as it was. A card without front matter gets one."""
    new_lines = new_card.split("\n")
    end = new_lines.index("---", 1)
    block = new_lines[1:end]
    lines = existing.split("\n")
    if not lines or lines[0].rstrip() != "---":
        return "\n".join(["---", *block, "---", ""]) + existing
    try:
        close = next(i for i in range(1, len(lines)) if lines[i].rstrip() in ("---", "..."))
    except StopIteration:
        return "\n".join(["---", *block, "---", ""]) + existing  # not front matter after all
    front = lines[1:close]
    start = next((i for i, ln in enumerate(front) if ln.startswith("co2_eq_emissions:")), None)
    if start is None:
        front = [*front, *block]
    else:
        stop = start + 1  # the block: its indented lines (blank lines between them)
        while stop < len(front) and (not front[stop].strip() or front[stop][:1] in " \t"):
            stop += 1
        while stop > start + 1 and not front[stop - 1].strip():
            stop -= 1  # blank lines after it stay
        front = [*front[:start], *block, *front[stop:]]
    return "\n".join(["---", *front, *lines[close:]])


def _range(t: Total, fmt: str) -> str:
    if fmt == "kwh":
        return f"{format_kwh(t.value)} ({format_kwh(t.low)}–{format_kwh(t.high)})"
    if fmt == "g":
        return f"{format_grams(t.value)} ({format_grams(t.low)}–{format_grams(t.high)})"
    return f"{format_usd(t.value)} ({format_usd(t.low)}–{format_usd(t.high)})"


def _missing(t: Total, what: str) -> str:
    return f" ({what} unknown for run(s) {', '.join(t.missing)})" if t.missing else ""


def paragraph(d: CardData) -> str:
    """The paragraph a paper can cite: hardware, GPU-hours, energy, carbon, with method and
    range."""
    n = len(d.run_ids)
    runs = "one run" if n == 1 else f"{n} runs"
    hw = ", ".join(d.hardware) or "unknown hardware"
    text = (
        f"Training ({runs}) used {hw} for {format_duration(d.wall_seconds)} of wall time"
        f" ({d.gpu_seconds / 3600:.4g} GPU-hours)."
    )
    if d.energy_kwh.known:
        text += (
            f" It consumed {_range(d.energy_kwh, 'kwh')} at the facility"
            f" ({d.energy_kwh.method}; {', '.join(d.energy_notes)})"
            f"{_missing(d.energy_kwh, 'energy')}."
        )
    if d.co2e_grams.known:
        text += (
            f" Its emissions were {_range(d.co2e_grams, 'g')} "
            f"({d.co2e_grams.method}: facility energy x grid intensity for "
            f"{'; '.join(d.locations) or 'an unknown location'}; "
            f"{'; '.join(d.intensity_sources)}){_missing(d.co2e_grams, 'carbon')}."
        )
    if d.cost_usd.known:
        text += f" Its compute cost {_range(d.cost_usd, 'usd')} ({d.cost_usd.method})."
    text += f" Measured with computewatch {__version__}."
    return text


def markdown(d: CardData) -> str:
    rows = [
        ("Hardware type", ", ".join(d.hardware) or "unknown"),
        ("Hours used", f"{d.wall_seconds / 3600:.4g} h wall, {d.gpu_seconds / 3600:.4g} GPU-hours"),
        ("Compute region", "; ".join(d.locations) or "unknown"),
        ("Energy (facility)", _range(d.energy_kwh, "kwh") + f", {d.energy_kwh.method}"),
        ("Carbon emitted", _range(d.co2e_grams, "g") + f", {d.co2e_grams.method}"),
    ]
    if d.cost_usd.known:
        rows.append(("Compute cost", _range(d.cost_usd, "usd") + f", {d.cost_usd.method}"))
    rows.append(("Runs", ", ".join(d.run_ids)))
    table = "\n".join(f"| {k} | {v.replace('|', '/')} |" for k, v in rows)
    return "## Environmental impact\n\n| | |\n|---|---|\n" + table + "\n\n" + paragraph(d) + "\n"


_LATEX = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    "–": "--", "×": r"$\times$",
}  # fmt: skip


def latex_escape(text: str) -> str:
    return "".join(_LATEX.get(c, c) for c in text)


def latex(d: CardData) -> str:
    body = latex_escape(paragraph(d)).replace("CO2e", r"CO\textsubscript{2}e")
    return f"% computewatch card: runs {', '.join(d.run_ids)}\n{body}\n"


def render_card(d: CardData, fmt: str) -> str:
    if fmt == "huggingface":
        return huggingface(d)
    if fmt == "markdown":
        return markdown(d)
    if fmt == "latex":
        return latex(d)
    raise ValueError(f"unknown card format {fmt!r}; choose from {', '.join(FORMATS)}")
