# Issue 45 (a pool of ImageNet-21K's size): counters the database keeps, for the pages that
# counted the whole review queue (9.2M items) or every image per request. Hand-written.
#
# The counters are kept by triggers, so no write path can forget one:
# - PostgreSQL: statement-level AFTER INSERT / UPDATE / DELETE triggers with transition tables.
#   A statement that changes 9.2 million items (the queue rebuild) adds one aggregate per
#   (source, class), not 9.2 million row-level trigger calls. The aggregate goes in by one
#   INSERT ... ON CONFLICT DO UPDATE whose rows are ordered by their key: two transactions that
#   touch the same counter rows then lock them in the same order and wait for each other rather
#   than deadlock (two annotators submitting in two classes, an ingest beside a queue build).
# - SQLite (the demo): row-level triggers; its writers are serialised anyway.
# Then both tables are filled from the rows already there, by one GROUP BY each, inside the same
# transaction (on PostgreSQL CREATE TRIGGER has locked both tables against writes until commit).
import django.db.models.deletion
import django.db.models.functions.comparison
from django.conf import settings
from django.db import migrations, models

STATUSES = ("open", "complete", "conflict", "adjudicated", "withdrawn")
FINAL = "('complete', 'adjudicated')"


def _queue_columns(r: str) -> list[tuple[str, str]]:
    """(counter column, its value for one curation_reviewitem row aliased ``r``)."""
    def flag(cond: str) -> str:
        return f"CASE WHEN {cond} THEN 1 ELSE 0 END"

    cols = [(f"n_{s}", flag(f"{r}.status = '{s}'")) for s in STATUSES]
    cols += [
        ("open_free", flag(f"{r}.status = 'open' AND {r}.done + {r}.leased < {r}.required")),
        ("final_decided", flag(f"{r}.status IN {FINAL} AND {r}.final_decision <> ''")),
        ("final_id", flag(f"{r}.status IN {FINAL} AND {r}.final_decision = 'id'")),
        ("final_ood", flag(f"{r}.status IN {FINAL} AND {r}.final_decision = 'ood'")),
        ("final_unclear", flag(f"{r}.status IN {FINAL} AND {r}.final_decision = 'unclear'")),
        ("final_not_target", flag(f"{r}.status IN {FINAL} AND {r}.final_decision = 'not_target'")),
        ("done_sum", f"CASE WHEN {r}.status <> 'withdrawn' THEN {r}.done ELSE 0 END"),
        ("required_sum", f"CASE WHEN {r}.status <> 'withdrawn' THEN {r}.required ELSE 0 END"),
        ("n_gold", flag(f"{r}.is_gold")),
    ]
    return cols


QUEUE_NAMES = [c for c, _ in _queue_columns("r")]
ITEMS = " + ".join(f"n_{s}" for s in STATUSES)  # a counter row's items, any status: 0 means the row is gone
QUEUE_KEY = "source_id, (COALESCE(candidate_class_id, 0))"


def _pg_queue_function(name: str, parts: list[tuple[str, int]]) -> str:
    selects = " UNION ALL ".join(
        "SELECT r.source_id, r.candidate_class_id, " + ", ".join(f"{sign} * ({expr}) AS {c}" for c, expr in _queue_columns("r")) + f" FROM {table} r"
        for table, sign in parts)
    sums = ", ".join(f"sum({c}) AS {c}" for c in QUEUE_NAMES)
    changed = " OR ".join(f"{c} <> 0" for c in QUEUE_NAMES)
    names = ", ".join(QUEUE_NAMES)
    sets = ", ".join(f"{c} = c.{c} + EXCLUDED.{c}" for c in QUEUE_NAMES)
    items_c = " + ".join(f"c.n_{s}" for s in STATUSES)
    return f"""
CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE emptied bigint[];
BEGIN
    WITH d AS ({selects}),
    g AS (SELECT source_id, COALESCE(candidate_class_id, 0) AS class_key, max(candidate_class_id) AS candidate_class_id, {sums}
          FROM d GROUP BY source_id, COALESCE(candidate_class_id, 0)),
    up AS (INSERT INTO curation_queueclasscount AS c (source_id, candidate_class_id, {names})
           SELECT source_id, candidate_class_id, {names} FROM g WHERE {changed} ORDER BY source_id, class_key
           ON CONFLICT ({QUEUE_KEY}) DO UPDATE SET {sets}
           RETURNING c.id, {items_c} AS items)
    SELECT array_agg(id) INTO emptied FROM up WHERE items = 0;
    IF emptied IS NOT NULL THEN
        DELETE FROM curation_queueclasscount WHERE id = ANY(emptied) AND {ITEMS} = 0;
    END IF;
    RETURN NULL;
END $$;"""


def _pg_image_function(name: str, parts: list[tuple[str, int]]) -> str:
    selects = " UNION ALL ".join(f"SELECT source_id, status, {sign} AS s FROM {table}" for table, sign in parts)
    return f"""
CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE emptied bigint[];
BEGIN
    WITH g AS (SELECT source_id, status, sum(s) AS n FROM ({selects}) d GROUP BY source_id, status HAVING sum(s) <> 0),
    up AS (INSERT INTO curation_sourceimagecount AS c (source_id, status, n)
           SELECT source_id, status, n FROM g ORDER BY source_id, status
           ON CONFLICT (source_id, status) DO UPDATE SET n = c.n + EXCLUDED.n
           RETURNING c.id, c.n)
    SELECT array_agg(id) INTO emptied FROM up WHERE n = 0;
    IF emptied IS NOT NULL THEN
        DELETE FROM curation_sourceimagecount WHERE id = ANY(emptied) AND n = 0;
    END IF;
    RETURN NULL;
END $$;"""


# An annotator's part of an open queue (AnnotatorQueueCount): a pair (assignment a, item i)
# counts when i is open; seen_open when a is not expired, seen_free when a is done or skipped and i
# still has a free slot. A statement on either table adds the change of the pairs its rows are in,
# against the other table as it stands: statements run one after another, so the sum is exact.
SEEN = [("seen_open", "CASE WHEN a.state <> 'expired' THEN 1 ELSE 0 END"),
        ("seen_free", "CASE WHEN a.state IN ('done', 'skipped') AND i.done + i.leased < i.required THEN 1 ELSE 0 END")]
SEEN_KEY = "annotator_id, source_id, (COALESCE(candidate_class_id, 0))"


def _pg_seen_function(name: str, parts: list[tuple[str, int]], side: str) -> str:
    """``side``: the table the trigger is on ("assignment" or "item"); its rows are ``parts``."""
    def pairs(table: str) -> str:
        if side == "assignment":
            return f"{table} a JOIN curation_reviewitem i ON i.id = a.item_id"
        return f"{table} i JOIN curation_assignment a ON a.item_id = i.id"

    selects = " UNION ALL ".join(
        "SELECT a.annotator_id, i.source_id, i.candidate_class_id, " + ", ".join(f"{sign} * ({expr}) AS {c}" for c, expr in SEEN)
        + f" FROM {pairs(table)} WHERE i.status = 'open'" for table, sign in parts)
    g = (f"WITH d AS ({selects}), g AS (SELECT annotator_id, source_id, COALESCE(candidate_class_id, 0) AS class_key, "
         "max(candidate_class_id) AS candidate_class_id, sum(seen_open) AS seen_open, sum(seen_free) AS seen_free FROM d "
         "GROUP BY annotator_id, source_id, COALESCE(candidate_class_id, 0) HAVING sum(seen_open) <> 0 OR sum(seen_free) <> 0)")
    return f"""
CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE emptied bigint[]; locked bigint;
BEGIN
    -- The classes' queue counter rows first, in key order, then the annotators' rows in key order:
    -- a lease (item, then assignment) and a submit (assignment, then item) of the same class in two
    -- transactions then take their locks in one order, so they wait for each other, never deadlock.
    {g}
    SELECT count(*) INTO locked FROM (SELECT q.id FROM curation_queueclasscount q
        JOIN (SELECT DISTINCT source_id, class_key FROM g) k ON q.source_id = k.source_id AND COALESCE(q.candidate_class_id, 0) = k.class_key
        ORDER BY q.source_id, COALESCE(q.candidate_class_id, 0) FOR UPDATE OF q) l;
    {g},
    up AS (INSERT INTO curation_annotatorqueuecount AS c (annotator_id, source_id, candidate_class_id, seen_open, seen_free)
           SELECT annotator_id, source_id, candidate_class_id, seen_open, seen_free FROM g ORDER BY annotator_id, source_id, class_key
           ON CONFLICT ({SEEN_KEY}) DO UPDATE SET seen_open = c.seen_open + EXCLUDED.seen_open, seen_free = c.seen_free + EXCLUDED.seen_free
           RETURNING c.id, c.seen_open, c.seen_free)
    SELECT array_agg(id) INTO emptied FROM up WHERE seen_open = 0 AND seen_free = 0;
    IF emptied IS NOT NULL THEN
        DELETE FROM curation_annotatorqueuecount WHERE id = ANY(emptied) AND seen_open = 0 AND seen_free = 0;
    END IF;
    RETURN NULL;
END $$;"""


EVENTS = {"ins": ("INSERT", "NEW TABLE AS new_rows", [("new_rows", 1)]),
          "upd": ("UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows", [("new_rows", 1), ("old_rows", -1)]),
          "del": ("DELETE", "OLD TABLE AS old_rows", [("old_rows", -1)])}
PG_TRIGGERS = [("curation_reviewitem", "oodc_queue_counts", _pg_queue_function), ("curation_image", "oodc_image_counts", _pg_image_function)]


SEEN_TRIGGERS = [("curation_assignment", "oodc_seen_assign", "assignment"), ("curation_reviewitem", "oodc_seen_item", "item")]


def _pg_forward() -> list[str]:
    out = ["LOCK TABLE curation_reviewitem, curation_image, curation_assignment IN SHARE ROW EXCLUSIVE MODE"]
    for table, prefix, make in PG_TRIGGERS:
        for short, (event, referencing, parts) in EVENTS.items():
            fn = f"{prefix}_{short}"
            out.append(make(fn, parts))
            out.append(f"CREATE TRIGGER {fn} AFTER {event} ON {table} REFERENCING {referencing} FOR EACH STATEMENT EXECUTE FUNCTION {fn}()")
    for table, prefix, side in SEEN_TRIGGERS:
        for short, (event, referencing, parts) in EVENTS.items():
            fn = f"{prefix}_{short}"
            out.append(_pg_seen_function(fn, parts, side))
            out.append(f"CREATE TRIGGER {fn} AFTER {event} ON {table} REFERENCING {referencing} FOR EACH STATEMENT EXECUTE FUNCTION {fn}()")
    return out


def _pg_backward() -> list[str]:
    tables = [(table, prefix) for table, prefix, _ in PG_TRIGGERS + SEEN_TRIGGERS]
    return [sql for table, prefix in tables for short in EVENTS
            for sql in (f"DROP TRIGGER IF EXISTS {prefix}_{short} ON {table}", f"DROP FUNCTION IF EXISTS {prefix}_{short}()")]


def _sqlite_queue_add(row: str, sign: str) -> str:
    sets = ", ".join(f"{c} = {c} {sign} ({expr})" for c, expr in _queue_columns(row))
    return (f"UPDATE curation_queueclasscount SET {sets} WHERE source_id = {row}.source_id "
            f"AND COALESCE(candidate_class_id, 0) = COALESCE({row}.candidate_class_id, 0);")


def _sqlite_queue_ensure(row: str) -> str:
    return (f"INSERT OR IGNORE INTO curation_queueclasscount (source_id, candidate_class_id, {', '.join(QUEUE_NAMES)}) "
            f"VALUES ({row}.source_id, {row}.candidate_class_id, {', '.join('0' for _ in QUEUE_NAMES)});")


def _sqlite_queue_drop_empty(row: str) -> str:
    return (f"DELETE FROM curation_queueclasscount WHERE source_id = {row}.source_id "
            f"AND COALESCE(candidate_class_id, 0) = COALESCE({row}.candidate_class_id, 0) AND {ITEMS} = 0;")


def _sqlite_image(row: str, sign: str) -> str:
    if sign == "+":
        return (f"INSERT OR IGNORE INTO curation_sourceimagecount (source_id, status, n) VALUES ({row}.source_id, {row}.status, 0); "
                f"UPDATE curation_sourceimagecount SET n = n + 1 WHERE source_id = {row}.source_id AND status = {row}.status;")
    return (f"UPDATE curation_sourceimagecount SET n = n - 1 WHERE source_id = {row}.source_id AND status = {row}.status; "
            f"DELETE FROM curation_sourceimagecount WHERE source_id = {row}.source_id AND status = {row}.status AND n = 0;")


QUEUE_WATCHED = "status, final_decision, done, leased, required, is_gold, source_id, candidate_class_id"  # not priority: the rebuild's bulk of changes


def _sqlite_seen_assignment(x: str, sign: str) -> str:
    """The change one assignment row ``x`` (NEW or OLD) makes to its annotator's row."""
    item = f"curation_reviewitem i WHERE i.id = {x}.item_id AND i.status = 'open'"
    ensure = (f"INSERT OR IGNORE INTO curation_annotatorqueuecount (annotator_id, source_id, candidate_class_id, seen_open, seen_free) "
              f"SELECT {x}.annotator_id, i.source_id, i.candidate_class_id, 0, 0 FROM {item};") if sign == "+" else ""
    seen = {c: expr.replace("a.", f"{x}.") for c, expr in SEEN}
    return (f"{ensure} UPDATE curation_annotatorqueuecount SET "
            + ", ".join(f"{c} = {c} {sign} COALESCE((SELECT {e} FROM {item}), 0)" for c, e in seen.items())
            + f" WHERE annotator_id = {x}.annotator_id AND EXISTS (SELECT 1 FROM {item} AND i.source_id = curation_annotatorqueuecount.source_id "
            f"AND COALESCE(i.candidate_class_id, 0) = COALESCE(curation_annotatorqueuecount.candidate_class_id, 0));"
            f"DELETE FROM curation_annotatorqueuecount WHERE annotator_id = {x}.annotator_id AND seen_open = 0 AND seen_free = 0;")


def _sqlite_seen_item(y: str, sign: str) -> str:
    """The change one queue item row ``y`` (NEW or OLD) makes to the rows of its annotators."""
    mine = f"curation_assignment a WHERE a.item_id = {y}.id AND a.annotator_id = curation_annotatorqueuecount.annotator_id"
    key = (f"{y}.status = 'open' AND source_id = {y}.source_id AND COALESCE(candidate_class_id, 0) = COALESCE({y}.candidate_class_id, 0) "
           f"AND annotator_id IN (SELECT annotator_id FROM curation_assignment WHERE item_id = {y}.id)")
    ensure = (f"INSERT OR IGNORE INTO curation_annotatorqueuecount (annotator_id, source_id, candidate_class_id, seen_open, seen_free) "
              f"SELECT a.annotator_id, {y}.source_id, {y}.candidate_class_id, 0, 0 FROM curation_assignment a "
              f"WHERE a.item_id = {y}.id AND {y}.status = 'open';") if sign == "+" else ""
    seen = {c: expr.replace("i.", f"{y}.") for c, expr in SEEN}
    return (f"{ensure} UPDATE curation_annotatorqueuecount SET "
            + ", ".join(f"{c} = {c} {sign} COALESCE((SELECT {e} FROM {mine}), 0)" for c, e in seen.items())
            + f" WHERE {key}; DELETE FROM curation_annotatorqueuecount WHERE {key} AND seen_open = 0 AND seen_free = 0;")


def _sqlite_forward() -> list[str]:
    return [
        f"CREATE TRIGGER oodc_seen_assign_ins AFTER INSERT ON curation_assignment BEGIN {_sqlite_seen_assignment('NEW', '+')} END",
        f"CREATE TRIGGER oodc_seen_assign_upd AFTER UPDATE OF state, item_id, annotator_id ON curation_assignment BEGIN "
        f"{_sqlite_seen_assignment('OLD', '-')} {_sqlite_seen_assignment('NEW', '+')} END",
        f"CREATE TRIGGER oodc_seen_assign_del AFTER DELETE ON curation_assignment BEGIN {_sqlite_seen_assignment('OLD', '-')} END",
        f"CREATE TRIGGER oodc_seen_item_ins AFTER INSERT ON curation_reviewitem BEGIN {_sqlite_seen_item('NEW', '+')} END",
        f"CREATE TRIGGER oodc_seen_item_upd AFTER UPDATE OF status, done, leased, required, source_id, candidate_class_id "
        f"ON curation_reviewitem BEGIN {_sqlite_seen_item('OLD', '-')} {_sqlite_seen_item('NEW', '+')} END",
        f"CREATE TRIGGER oodc_seen_item_del AFTER DELETE ON curation_reviewitem BEGIN {_sqlite_seen_item('OLD', '-')} END",

        f"CREATE TRIGGER oodc_queue_counts_ins AFTER INSERT ON curation_reviewitem BEGIN "
        f"{_sqlite_queue_ensure('NEW')} {_sqlite_queue_add('NEW', '+')} END",
        f"CREATE TRIGGER oodc_queue_counts_upd AFTER UPDATE OF {QUEUE_WATCHED} ON curation_reviewitem BEGIN "
        f"{_sqlite_queue_add('OLD', '-')} {_sqlite_queue_ensure('NEW')} {_sqlite_queue_add('NEW', '+')} {_sqlite_queue_drop_empty('OLD')} END",
        f"CREATE TRIGGER oodc_queue_counts_del AFTER DELETE ON curation_reviewitem BEGIN "
        f"{_sqlite_queue_add('OLD', '-')} {_sqlite_queue_drop_empty('OLD')} END",
        f"CREATE TRIGGER oodc_image_counts_ins AFTER INSERT ON curation_image BEGIN {_sqlite_image('NEW', '+')} END",
        f"CREATE TRIGGER oodc_image_counts_upd AFTER UPDATE OF status, source_id ON curation_image BEGIN "
        f"{_sqlite_image('OLD', '-')} {_sqlite_image('NEW', '+')} END",
        f"CREATE TRIGGER oodc_image_counts_del AFTER DELETE ON curation_image BEGIN {_sqlite_image('OLD', '-')} END",
    ]


def _backfill() -> list[str]:
    sums = ", ".join(f"sum({expr})" for _c, expr in _queue_columns("r"))
    return [
        f"INSERT INTO curation_queueclasscount (source_id, candidate_class_id, {', '.join(QUEUE_NAMES)}) "
        f"SELECT r.source_id, r.candidate_class_id, {sums} FROM curation_reviewitem r GROUP BY r.source_id, r.candidate_class_id",
        "INSERT INTO curation_sourceimagecount (source_id, status, n) SELECT source_id, status, count(*) FROM curation_image GROUP BY source_id, status",
        "INSERT INTO curation_annotatorqueuecount (annotator_id, source_id, candidate_class_id, seen_open, seen_free) "
        f"SELECT a.annotator_id, i.source_id, i.candidate_class_id, {', '.join(f'sum({e})' for _c, e in SEEN)} "
        "FROM curation_assignment a JOIN curation_reviewitem i ON i.id = a.item_id WHERE i.status = 'open' "
        f"GROUP BY a.annotator_id, i.source_id, i.candidate_class_id HAVING {' OR '.join(f'sum({e}) <> 0' for _c, e in SEEN)}",
    ]


def forward(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        statements = _pg_forward()
    elif vendor == "sqlite":
        statements = _sqlite_forward()
    else:
        raise NotImplementedError(f"the queue counters' triggers are written for PostgreSQL and SQLite, not {vendor}")
    for sql in statements + _backfill():
        schema_editor.execute(sql, params=None)


def backward(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        statements = _pg_backward()
    else:
        statements = [f"DROP TRIGGER IF EXISTS {prefix}_{short}" for prefix in ("oodc_queue_counts", "oodc_image_counts", "oodc_seen_assign",
                                                                                "oodc_seen_item") for short in EVENTS]
    for sql in statements:
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):

    dependencies = [
        ('curation', '0031_duplicate_members_index'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='QueueClassCount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('n_open', models.BigIntegerField(default=0, help_text='Items open (waiting for reviews or holding leases)')),
                ('n_complete', models.BigIntegerField(default=0, help_text='Items whose reviews agreed')),
                ('n_conflict', models.BigIntegerField(default=0, help_text='Items waiting for adjudication')),
                ('n_adjudicated', models.BigIntegerField(default=0)),
                ('n_withdrawn', models.BigIntegerField(default=0, help_text='Items whose class or image left the pool')),
                ('open_free', models.BigIntegerField(default=0, help_text='Open items with a free slot (done + leased < required)')),
                ('final_decided', models.BigIntegerField(default=0, help_text='Complete or adjudicated items with a final decision')),
                ('final_id', models.BigIntegerField(default=0, help_text='... whose final decision is id (an ID object visible: contamination)')),
                ('final_ood', models.BigIntegerField(default=0)),
                ('final_unclear', models.BigIntegerField(default=0)),
                ('final_not_target', models.BigIntegerField(default=0)),
                ('done_sum', models.BigIntegerField(default=0, help_text='Reviews done, summed over the items not withdrawn')),
                ('required_sum', models.BigIntegerField(default=0, help_text='Reviews required, summed over the items not withdrawn')),
                ('n_gold', models.BigIntegerField(default=0, help_text='Gold items (any status)')),
                ('candidate_class', models.ForeignKey(blank=True, db_constraint=False, db_index=False, help_text='Empty: the items without a class',
                                                      null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+',
                                                      to='curation.candidateclass')),
                ('source', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+',
                                             to='curation.source')),
            ],
            options={
                'constraints': [models.UniqueConstraint(models.F('source'),
                                                        django.db.models.functions.comparison.Coalesce(models.F('candidate_class'), models.Value(0)),
                                                        name='queue_class_count_key')],
            },
        ),
        migrations.CreateModel(
            name='AnnotatorQueueCount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('seen_open', models.BigIntegerField(default=0, help_text='Their assignments, not expired, on open items')),
                ('seen_free', models.BigIntegerField(default=0, help_text='Their done or skipped assignments on open items with a free slot')),
                ('annotator', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+',
                                                to=settings.AUTH_USER_MODEL)),
                ('candidate_class', models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True,
                                                      on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='curation.candidateclass')),
                ('source', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+',
                                             to='curation.source')),
            ],
            options={
                'constraints': [models.UniqueConstraint(models.F('annotator'), models.F('source'),
                                                        django.db.models.functions.comparison.Coalesce(models.F('candidate_class'), models.Value(0)),
                                                        name='annotator_queue_count_key')],
            },
        ),
        migrations.CreateModel(
            name='SourceImageCount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('status', models.CharField(max_length=16)),
                ('n', models.BigIntegerField(default=0)),
                ('source', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+',
                                             to='curation.source')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('source', 'status'), name='source_image_count_key')],
            },
        ),
        migrations.CreateModel(
            name='ReviewStatsSnapshot',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('computed_at', models.DateTimeField(blank=True, help_text='Empty: never computed yet', null=True)),
                ('requested_at', models.DateTimeField(blank=True, help_text='When a page last asked for a recomputation', null=True)),
                ('reviews', models.BigIntegerField(default=0, help_text='Non-gold reviews the figures are over')),
                ('done_sum', models.BigIntegerField(default=0, help_text="The queue's reviews done (QueueClassCount) when computed: stale when it moved")),
                ('figures', models.JSONField(blank=True, default=dict)),
            ],
        ),
        migrations.RunPython(forward, backward),
    ]
