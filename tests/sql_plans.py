"""The plan PostgreSQL would choose for a statement at a pool's size, in a test's small tables."""
from __future__ import annotations

import re

from django.db import connection, transaction


def plan_without_seq_scans(sql: str, params=None) -> str:
    """``EXPLAIN sql`` with sequential scans priced out: a test's tables are so small that the
    planner would read them whole whatever the indexes, so this shows the index a statement can
    use on a large table (its absence, or a Seq Scan left in the plan, is the cause a test pins).

    The tables the statement names are analysed first, inside the test's transaction (ANALYZE
    counts the transaction's own rows), so the choice among usable indexes follows this test's
    rows and not the row counts an earlier test left in ``pg_class`` (ANALYZE's estimate is written
    in place and outlives a rolled-back test: with it one test's plan depended on which tests the
    same xdist worker had run before)."""
    tables = sorted(set(re.findall(r'"((?:curation|auth|django)_[a-z0-9_]+)"', sql)))
    with transaction.atomic(), connection.cursor() as cur:
        for table in tables:
            cur.execute(f'ANALYZE "{table}"')
        cur.execute("SET LOCAL enable_seqscan = off")
        try:
            cur.execute(f"EXPLAIN {sql}", params)
            return "\n".join(r[0] for r in cur.fetchall())
        finally:
            cur.execute("SET LOCAL enable_seqscan = on")
