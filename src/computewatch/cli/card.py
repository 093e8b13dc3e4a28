"""``computewatch card RUN... --format huggingface|markdown|latex [-o FILE]``: the compute of
a model's training (one run or several, summed) for its model card or paper
(views/card.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from computewatch.errors import ComputewatchError, UsageError
from computewatch.escape import clean_text

__all__ = ["add_card_parser", "cmd_card"]

_FORMATS = ("huggingface", "markdown", "latex")  # views.card.FORMATS (the parser loads nothing)


def add_card_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``card`` to the CLI's subcommands."""
    p: argparse.ArgumentParser = sub.add_parser(
        "card",
        help="a model card's co2_eq_emissions block, or a paragraph for a paper",
        description="The training compute of one or several runs (a model's whole training, "
        "summed): hardware, GPU-hours, energy and carbon with method and range, as Hugging "
        "Face model card front matter, a Markdown section or a LaTeX paragraph "
        "(docs/trackers.md).",
    )
    p.add_argument(
        "runs", nargs="+", type=clean_text, metavar="RUN", help="id, id prefix, name or 'last'"
    )
    p.add_argument("--format", choices=_FORMATS, default="huggingface")
    p.add_argument(
        "--training-type",
        choices=("pre-training", "fine-tuning"),
        default=None,
        help="the card's training_type (default: pre-training, said on standard error)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="default: standard output. An existing model card (--format huggingface) gets "
        "the co2_eq_emissions block merged into its front matter, everything else kept; "
        "another existing file needs --force",
    )
    p.add_argument(
        "--force", action="store_true", help="replace an existing FILE whole instead of merging"
    )
    p.add_argument("--db", metavar="PATH", help="database file (default: the usual one)")
    return p


def cmd_card(args: argparse.Namespace) -> int:
    # this command's own: cli.main imports this module for its parser at every start
    from computewatch.analysis.summary import current_summary
    from computewatch.paths import resolve_db_path
    from computewatch.store.spooled import open_store
    from computewatch.views.card import card_data, merge_card, render_card

    path = resolve_db_path(args.db)
    if not path.exists():
        raise ComputewatchError(f"no runs recorded yet ({path} does not exist)")
    with open_store(path) as store:
        summaries = []
        seen: set[str] = set()
        for ref in args.runs:
            run = store.find_run(ref)
            if run.id in seen:
                continue  # the same run named twice is counted once
            seen.add(run.id)
            summaries.append(current_summary(store, run))
    training_type = args.training_type
    if training_type is None:
        training_type = "pre-training"
        if args.format == "huggingface":
            sys.stderr.write(
                "computewatch: training_type not given (--training-type): the card says "
                "pre-training\n"
            )
    text = render_card(card_data(summaries, training_type), args.format)
    if args.output:
        out = Path(args.output).expanduser()
        try:
            if out.exists() and not args.force:
                if args.format != "huggingface":
                    raise UsageError(
                        f"{args.output} exists: --force to replace it (only a Hugging Face "
                        "model card is merged into)"
                    )
                text = merge_card(out.read_text("utf-8"), text)
            out.write_text(text)
        except (OSError, UnicodeDecodeError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else e
            raise ComputewatchError(f"cannot write {args.output}: {why}") from None
    else:
        sys.stdout.write(text)
    return 0
