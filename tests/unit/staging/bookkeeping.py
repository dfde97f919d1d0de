"""A staging unit test's database on the shared target, and lastline's masking bookkeeping as it was before the test:
the test's database dropped after, and of the bookkeeping only what the test's run added removed."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from lastline.core.sql import META_DB


@contextlib.contextmanager
def kept(server: Any, database: str, run: str, tables: tuple[str, ...]) -> Iterator[None]:
    """`database` made anew for the block (dropped after); `META_DB`'s `tables` left as they were, but for `run`'s rows."""
    with server.session() as cur:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (META_DB,))
        had = {r[0] for r in cur.fetchall()}
        cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (META_DB,))
        had_db = bool(cur.fetchone()[0])
        cur.execute(f"DROP DATABASE IF EXISTS {database}")
        cur.execute(f"CREATE DATABASE {database}")
    try:
        yield
    finally:
        with server.session() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {database}")
            if not had_db:
                cur.execute(f"DROP DATABASE IF EXISTS {META_DB}")
            for table in tables if had_db else ():
                if table in had:
                    cur.execute(f"DELETE FROM {META_DB}.{table} WHERE run_key = %s", (run,))
                else:
                    cur.execute(f"DROP TABLE IF EXISTS {META_DB}.{table}")
            cur.connection.commit()
