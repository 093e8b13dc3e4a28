"""The store's schema, as an ordered list of forward migrations.

Each migration runs once, inside one transaction, and bumps ``PRAGMA user_version``. Never edit
a migration that has shipped: add the next one.
"""

from __future__ import annotations

MIGRATIONS: tuple[str, ...] = (
    # 1: runs, their series, ticks, samples, steps (and the processes that wrote them), processes.
    """
    CREATE TABLE runs (
        key INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        name TEXT,
        tags TEXT NOT NULL DEFAULT '{}',
        command TEXT NOT NULL DEFAULT '[]',
        cwd TEXT,
        mode TEXT NOT NULL,
        status TEXT NOT NULL,
        exit_code INTEGER,
        started_at REAL NOT NULL,
        ended_at REAL,
        interval_seconds REAL NOT NULL,
        host TEXT NOT NULL DEFAULT '{}',
        supervisor_host TEXT,
        supervisor_pid INTEGER,
        supervisor_start INTEGER,
        heartbeat_at REAL,
        data_until REAL,
        notes TEXT NOT NULL DEFAULT '[]',
        summary TEXT,
        samples_deleted_at REAL
    );
    CREATE INDEX runs_started ON runs(started_at);
    CREATE INDEX runs_name ON runs(name, started_at);
    CREATE TABLE series (
        run_key INTEGER NOT NULL REFERENCES runs(key) ON DELETE CASCADE,
        idx INTEGER NOT NULL,
        name TEXT NOT NULL,
        labels TEXT NOT NULL,
        kind INTEGER NOT NULL,
        PRIMARY KEY (run_key, idx)
    ) WITHOUT ROWID;
    CREATE TABLE ticks (
        run_key INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        mono REAL NOT NULL,
        wall REAL NOT NULL,
        PRIMARY KEY (run_key, seq)
    ) WITHOUT ROWID;
    -- Keyed by tick first: each batch appends at the end of the b-tree (3x the insert rate of
    -- a series-first key, measured in benchmarks/).
    CREATE TABLE samples (
        run_key INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        series INTEGER NOT NULL,
        value REAL NOT NULL,
        PRIMARY KEY (run_key, seq, series)
    ) WITHOUT ROWID;
    CREATE TABLE steps (
        run_key INTEGER NOT NULL,
        pid INTEGER NOT NULL,
        mono REAL NOT NULL,
        wall REAL NOT NULL,
        samples REAL,
        tokens REAL
    );
    CREATE INDEX steps_run ON steps(run_key, pid, mono);
    CREATE TABLE writers (
        run_key INTEGER NOT NULL,
        pid INTEGER NOT NULL,
        started_mono REAL NOT NULL,
        meta TEXT NOT NULL DEFAULT '{}',
        PRIMARY KEY (run_key, pid)
    ) WITHOUT ROWID;
    -- Key columns lead: SQLite 3.40.0-3.41.0 integrity_check misreports WITHOUT ROWID tables
    -- whose key columns are not the first ones.
    CREATE TABLE processes (
        run_key INTEGER NOT NULL,
        pid INTEGER NOT NULL,
        first_seen REAL NOT NULL,
        ppid INTEGER NOT NULL,
        name TEXT NOT NULL,
        cmdline TEXT NOT NULL DEFAULT '[]',
        PRIMARY KEY (run_key, pid, first_seen)
    ) WITHOUT ROWID;
    """,
    # 2: inside the training loop: FLOPs per step, named phases of steps, served requests.
    """
    ALTER TABLE steps ADD COLUMN flops REAL;
    CREATE TABLE phases (
        run_key INTEGER NOT NULL,
        pid INTEGER NOT NULL,
        name TEXT NOT NULL,
        start REAL NOT NULL,
        end REAL NOT NULL,
        accel_seconds REAL
    );
    CREATE INDEX phases_run ON phases(run_key, pid, start);
    CREATE TABLE requests (
        run_key INTEGER NOT NULL,
        pid INTEGER NOT NULL,
        name TEXT NOT NULL,
        start REAL NOT NULL,
        end REAL NOT NULL,
        tokens_in REAL,
        tokens_out REAL,
        ok INTEGER NOT NULL
    );
    CREATE INDEX requests_run ON requests(run_key, start);
    """,
    # 3: what a run records beside its samples (its configuration, environment, governance
    # declaration, artifacts such as profiles: one JSON document per kind), and what has been
    # uploaded to which server (the local store is the upload spool).
    """
    CREATE TABLE run_meta (
        run_key INTEGER NOT NULL REFERENCES runs(key) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (run_key, kind)
    ) WITHOUT ROWID;
    CREATE TABLE uploads (
        run_key INTEGER NOT NULL REFERENCES runs(key) ON DELETE CASCADE,
        server TEXT NOT NULL,
        seq INTEGER NOT NULL,
        final INTEGER NOT NULL,
        uploaded_at REAL NOT NULL,
        PRIMARY KEY (run_key, server)
    ) WITHOUT ROWID;
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)
