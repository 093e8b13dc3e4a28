"""Models per team: a model is ``team/name``, and one team's runs may name another team's model
as their base only with that team's grant (``model_grants``).

Upgrade: every ``model_runs`` row's model and base model are qualified with the row's team (a
name that already holds a ``/`` is kept); an obligation's model, which has no team of its own,
is qualified with the team that first declared the name: the first ``run`` or ``running`` entry
of the log that names it (the replay of the log resolves the names of entries written before
this migration the same way, computewatch.governance.replay), else the team of its earliest
run in ``model_runs``. On PostgreSQL the model columns widen to 401 characters (a team name and
a model name of 200 each; SQLite does not enforce lengths).

Downgrade: the team is taken off again where it is the row's own (or a model's whose runs are
here), ``model_grants`` is dropped; an obligation whose bare name would clash with another open
one of the same tier keeps its qualified name.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-10
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

SEP = "/"
_MODEL_RUNS = sa.table(
    "model_runs",
    sa.column("run_id", sa.String),
    sa.column("team", sa.String),
    sa.column("model", sa.String),
    sa.column("base_model", sa.String),
    sa.column("started_at", sa.Float),
)
_OBLIGATIONS = sa.table(
    "obligations",
    sa.column("id", sa.Integer),
    sa.column("model", sa.String),
    sa.column("tier", sa.String),
    sa.column("state", sa.String),
)
_ENTRIES = sa.table(
    "ledger_entries",
    sa.column("seq", sa.BigInteger),
    sa.column("kind", sa.String),
    sa.column("body", sa.Text),
)
_COLUMNS = (("model_runs", "model", False), ("model_runs", "base_model", True),
            ("obligations", "model", False))  # fmt: skip


def _widen(length: int) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column, nullable in _COLUMNS:
        op.alter_column(table, column, type_=sa.String(length), existing_nullable=nullable)


def _declared(kind: str, body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The (team, model name) pairs a ``run`` or ``running`` entry's body declares."""
    if kind == "run":
        figures = body.get("figures", body)
        pairs = [(body.get("team"), figures.get("model") if isinstance(figures, Mapping) else None)]
    else:
        pairs = []
        for r in body.get("runs") or []:
            figures = r.get("figures") if isinstance(r, Mapping) else None
            if isinstance(figures, Mapping):
                pairs.append((r.get("team"), figures.get("model")))
    return [(t, m) for t, m in pairs if isinstance(t, str) and isinstance(m, str)]


def _owners(conn: sa.Connection, names: set[str]) -> dict[str, str]:
    """The team that first declared each bare model name: from the log, else ``model_runs``."""
    owners: dict[str, str] = {}
    q = (
        sa.select(_ENTRIES.c.kind, _ENTRIES.c.body)
        .where(_ENTRIES.c.kind.in_(("run", "running")))
        .order_by(_ENTRIES.c.seq)
    )
    for kind, text in conn.execute(q):
        if len(owners) == len(names):
            break
        try:
            body = json.loads(text)
        except ValueError:
            continue
        if not isinstance(body, Mapping):
            continue
        for team, model in _declared(kind, body):
            if model in names and model not in owners:
                owners[model] = team
    q2 = sa.select(_MODEL_RUNS.c.model, _MODEL_RUNS.c.team).order_by(
        _MODEL_RUNS.c.started_at, _MODEL_RUNS.c.run_id
    )
    for model, team in conn.execute(q2.where(_MODEL_RUNS.c.model.in_(sorted(names - set(owners))))):
        owners.setdefault(model, team)
    return owners


def upgrade() -> None:
    _widen(401)
    op.create_table(
        "model_grants",
        sa.Column("model", sa.String(401), primary_key=True),
        sa.Column("team", sa.String(200), primary_key=True),
        sa.Column("granted_at", sa.Float, nullable=False),
        sa.Column("granted_by", sa.String(200), nullable=False),
    )
    conn = op.get_bind()
    bare = {m for (m,) in conn.execute(sa.select(_OBLIGATIONS.c.model).distinct()) if SEP not in m}
    owners = _owners(conn, bare) if bare else {}
    for name, team in sorted(owners.items()):
        conn.execute(
            sa.update(_OBLIGATIONS)
            .where(_OBLIGATIONS.c.model == name)
            .values(model=f"{team}{SEP}{name}")
        )
    t = _MODEL_RUNS.c
    conn.execute(
        sa.update(_MODEL_RUNS).where(~t.model.contains(SEP)).values(model=t.team + SEP + t.model)
    )
    conn.execute(
        sa.update(_MODEL_RUNS)
        .where(t.base_model.is_not(None), ~t.base_model.contains(SEP))
        .values(base_model=t.team + SEP + t.base_model)
    )


def downgrade() -> None:
    conn = op.get_bind()
    t = _MODEL_RUNS.c
    qualified = {  # the models this migration (or ingest since) qualified: their bare names
        model: model[len(team) + 1 :]
        for team, model in conn.execute(sa.select(t.team, t.model).distinct())
        if model.startswith(team + SEP)
    }
    for team, base in conn.execute(
        sa.select(t.team, t.base_model).where(t.base_model.is_not(None)).distinct()
    ):
        if base not in qualified and base.startswith(team + SEP):
            qualified[base] = base[len(team) + 1 :]
    for q, name in sorted(qualified.items()):
        conn.execute(sa.update(_MODEL_RUNS).where(t.model == q).values(model=name))
        conn.execute(sa.update(_MODEL_RUNS).where(t.base_model == q).values(base_model=name))
    o = _OBLIGATIONS.c
    open_ = {
        (m, tier) for m, tier in conn.execute(sa.select(o.model, o.tier).where(o.state == "open"))
    }
    for oid, model, tier, state in conn.execute(
        sa.select(o.id, o.model, o.tier, o.state).order_by(o.id)
    ).all():
        name = qualified.get(model)
        if name is None:
            continue
        if state == "open":
            if (name, tier) in open_:
                continue  # another team's model of that name holds it: keep this one apart
            open_.discard((model, tier))
            open_.add((name, tier))
        conn.execute(sa.update(_OBLIGATIONS).where(o.id == oid).values(model=name))
    op.drop_table("model_grants")
    _widen(200)
