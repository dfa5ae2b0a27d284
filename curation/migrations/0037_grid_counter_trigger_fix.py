# Issue 62, row 1: the SQLite counter triggers of 0032_queue_counters made a missing counter row
# with ``INSERT OR IGNORE``. Inside a trigger SQLite replaces a body statement's conflict clause
# by the one of the statement that fired it, and an upsert (``INSERT ... ON CONFLICT DO UPDATE``,
# the grid's page lease re-leasing an annotator's expired assignment) fires the UPDATE trigger
# under ABORT: the counter row that was there already raised ``UNIQUE constraint failed: index
# 'annotator_queue_count_key'`` (an outer ``OR REPLACE`` would have replaced it by zeros). The
# SQLite triggers are made again with ``INSERT ... SELECT ... WHERE NOT EXISTS``, which needs no
# conflict clause, so every write path (plain, upsert on either branch, OR IGNORE, OR REPLACE)
# counts alike. PostgreSQL's statement-level triggers are not changed: their counter upserts carry
# their own ON CONFLICT DO UPDATE, and an upsert fires both the INSERT and the UPDATE statement
# triggers with its inserted and updated rows in their transition tables. Hand-written.
import importlib

from django.db import migrations

_base = importlib.import_module("curation.migrations.0032_queue_counters")
SEEN, QUEUE_NAMES, QUEUE_WATCHED = _base.SEEN, _base.QUEUE_NAMES, _base.QUEUE_WATCHED
_queue_add, _queue_drop_empty = _base._sqlite_queue_add, _base._sqlite_queue_drop_empty

TRIGGERS = [f"{prefix}_{short}" for prefix in ("oodc_queue_counts", "oodc_image_counts", "oodc_seen_assign", "oodc_seen_item")
            for short in ("ins", "upd", "del")]


def _seen_row_missing(annotator: str, source: str, cls: str) -> str:
    return (f"NOT EXISTS (SELECT 1 FROM curation_annotatorqueuecount c WHERE c.annotator_id = {annotator} "
            f"AND c.source_id = {source} AND COALESCE(c.candidate_class_id, 0) = COALESCE({cls}, 0))")


def _queue_ensure(row: str) -> str:
    return (f"INSERT INTO curation_queueclasscount (source_id, candidate_class_id, {', '.join(QUEUE_NAMES)}) "
            f"SELECT {row}.source_id, {row}.candidate_class_id, {', '.join('0' for _ in QUEUE_NAMES)} "
            f"WHERE NOT EXISTS (SELECT 1 FROM curation_queueclasscount q WHERE q.source_id = {row}.source_id "
            f"AND COALESCE(q.candidate_class_id, 0) = COALESCE({row}.candidate_class_id, 0));")


def _image(row: str, sign: str) -> str:
    if sign == "+":
        return (f"INSERT INTO curation_sourceimagecount (source_id, status, n) SELECT {row}.source_id, {row}.status, 0 "
                f"WHERE NOT EXISTS (SELECT 1 FROM curation_sourceimagecount s WHERE s.source_id = {row}.source_id AND s.status = {row}.status); "
                f"UPDATE curation_sourceimagecount SET n = n + 1 WHERE source_id = {row}.source_id AND status = {row}.status;")
    return (f"UPDATE curation_sourceimagecount SET n = n - 1 WHERE source_id = {row}.source_id AND status = {row}.status; "
            f"DELETE FROM curation_sourceimagecount WHERE source_id = {row}.source_id AND status = {row}.status AND n = 0;")


def _seen_assignment(x: str, sign: str) -> str:
    """The change one assignment row ``x`` (NEW or OLD) makes to its annotator's row (as 0032)."""
    item = f"curation_reviewitem i WHERE i.id = {x}.item_id AND i.status = 'open'"
    ensure = (f"INSERT INTO curation_annotatorqueuecount (annotator_id, source_id, candidate_class_id, seen_open, seen_free) "
              f"SELECT {x}.annotator_id, i.source_id, i.candidate_class_id, 0, 0 FROM {item} "
              f"AND {_seen_row_missing(f'{x}.annotator_id', 'i.source_id', 'i.candidate_class_id')};") if sign == "+" else ""
    seen = {c: expr.replace("a.", f"{x}.") for c, expr in SEEN}
    return (f"{ensure} UPDATE curation_annotatorqueuecount SET "
            + ", ".join(f"{c} = {c} {sign} COALESCE((SELECT {e} FROM {item}), 0)" for c, e in seen.items())
            + f" WHERE annotator_id = {x}.annotator_id AND EXISTS (SELECT 1 FROM {item} AND i.source_id = curation_annotatorqueuecount.source_id "
            f"AND COALESCE(i.candidate_class_id, 0) = COALESCE(curation_annotatorqueuecount.candidate_class_id, 0));"
            f"DELETE FROM curation_annotatorqueuecount WHERE annotator_id = {x}.annotator_id AND seen_open = 0 AND seen_free = 0;")


def _seen_item(y: str, sign: str) -> str:
    """The change one queue item row ``y`` (NEW or OLD) makes to the rows of its annotators (as 0032)."""
    mine = f"curation_assignment a WHERE a.item_id = {y}.id AND a.annotator_id = curation_annotatorqueuecount.annotator_id"
    key = (f"{y}.status = 'open' AND source_id = {y}.source_id AND COALESCE(candidate_class_id, 0) = COALESCE({y}.candidate_class_id, 0) "
           f"AND annotator_id IN (SELECT annotator_id FROM curation_assignment WHERE item_id = {y}.id)")
    ensure = (f"INSERT INTO curation_annotatorqueuecount (annotator_id, source_id, candidate_class_id, seen_open, seen_free) "
              f"SELECT a.annotator_id, {y}.source_id, {y}.candidate_class_id, 0, 0 FROM curation_assignment a "
              f"WHERE a.item_id = {y}.id AND {y}.status = 'open' "
              f"AND {_seen_row_missing('a.annotator_id', f'{y}.source_id', f'{y}.candidate_class_id')};") if sign == "+" else ""
    seen = {c: expr.replace("i.", f"{y}.") for c, expr in SEEN}
    return (f"{ensure} UPDATE curation_annotatorqueuecount SET "
            + ", ".join(f"{c} = {c} {sign} COALESCE((SELECT {e} FROM {mine}), 0)" for c, e in seen.items())
            + f" WHERE {key}; DELETE FROM curation_annotatorqueuecount WHERE {key} AND seen_open = 0 AND seen_free = 0;")


def _sqlite_triggers() -> list[str]:
    """0032's SQLite triggers, each as it was but for how a missing counter row is made."""
    return [
        f"CREATE TRIGGER oodc_seen_assign_ins AFTER INSERT ON curation_assignment BEGIN {_seen_assignment('NEW', '+')} END",
        f"CREATE TRIGGER oodc_seen_assign_upd AFTER UPDATE OF state, item_id, annotator_id ON curation_assignment BEGIN "
        f"{_seen_assignment('OLD', '-')} {_seen_assignment('NEW', '+')} END",
        f"CREATE TRIGGER oodc_seen_assign_del AFTER DELETE ON curation_assignment BEGIN {_seen_assignment('OLD', '-')} END",
        f"CREATE TRIGGER oodc_seen_item_ins AFTER INSERT ON curation_reviewitem BEGIN {_seen_item('NEW', '+')} END",
        f"CREATE TRIGGER oodc_seen_item_upd AFTER UPDATE OF status, done, leased, required, source_id, candidate_class_id "
        f"ON curation_reviewitem BEGIN {_seen_item('OLD', '-')} {_seen_item('NEW', '+')} END",
        f"CREATE TRIGGER oodc_seen_item_del AFTER DELETE ON curation_reviewitem BEGIN {_seen_item('OLD', '-')} END",

        f"CREATE TRIGGER oodc_queue_counts_ins AFTER INSERT ON curation_reviewitem BEGIN "
        f"{_queue_ensure('NEW')} {_queue_add('NEW', '+')} END",
        f"CREATE TRIGGER oodc_queue_counts_upd AFTER UPDATE OF {QUEUE_WATCHED} ON curation_reviewitem BEGIN "
        f"{_queue_add('OLD', '-')} {_queue_ensure('NEW')} {_queue_add('NEW', '+')} {_queue_drop_empty('OLD')} END",
        f"CREATE TRIGGER oodc_queue_counts_del AFTER DELETE ON curation_reviewitem BEGIN "
        f"{_queue_add('OLD', '-')} {_queue_drop_empty('OLD')} END",
        f"CREATE TRIGGER oodc_image_counts_ins AFTER INSERT ON curation_image BEGIN {_image('NEW', '+')} END",
        f"CREATE TRIGGER oodc_image_counts_upd AFTER UPDATE OF status, source_id ON curation_image BEGIN "
        f"{_image('OLD', '-')} {_image('NEW', '+')} END",
        f"CREATE TRIGGER oodc_image_counts_del AFTER DELETE ON curation_image BEGIN {_image('OLD', '-')} END",
    ]


def _replace(schema_editor, statements: list[str]) -> None:
    if schema_editor.connection.vendor != "sqlite":
        return  # PostgreSQL's triggers stay as 0032 made them (module comment)
    for sql in [f"DROP TRIGGER IF EXISTS {name}" for name in TRIGGERS] + statements:
        schema_editor.execute(sql, params=None)


def forward(apps, schema_editor) -> None:
    _replace(schema_editor, _sqlite_triggers())


def backward(apps, schema_editor) -> None:
    _replace(schema_editor, _base._sqlite_forward())


class Migration(migrations.Migration):

    dependencies = [
        ("curation", "0036_review_item_no_prefix_indexes"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
