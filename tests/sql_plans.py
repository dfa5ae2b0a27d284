"""The plan PostgreSQL would choose for a statement at a pool's size, in a test's small tables."""
from __future__ import annotations

from django.db import connection, transaction


def plan_without_seq_scans(sql: str, params=None) -> str:
    """``EXPLAIN sql`` with sequential scans priced out: a test's tables are so small that the
    planner would read them whole whatever the indexes, so this shows the index a statement can
    use on a large table (its absence, or a Seq Scan left in the plan, is the cause a test pins)."""
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")
        try:
            cur.execute(f"EXPLAIN {sql}", params)
            return "\n".join(r[0] for r in cur.fetchall())
        finally:
            cur.execute("SET LOCAL enable_seqscan = on")
