# Issue 45 (a pool of ImageNet-21K's size): per plan and stratum, the units whose images are
# decided, kept by the database. Hand-written.
#
# The certification page's bound joined every unit of the plan to the queue to count the decided
# ones (9 million units at 13.2M images: 3 s a page). A unit's image changes its decision only
# through an UPDATE of curation_reviewitem's status or final_decision, so a trigger on those
# columns keeps the count; the service fills a new plan's rows when it makes the plan (its units
# are the undecided images, so the rows start at about zero).
# - PostgreSQL: a row-level trigger whose WHEN lets through only the rows whose decided / id /
#   unclear standing changes (a queue rebuild that changes priorities, or withdraws open items,
#   calls no function); the function adds the change to the rows of the plans that hold the item
#   (one probe of the units' item index: no plan holds most items). It first takes the item's
#   source's advisory lock, shared: a plan being made takes it exclusively before it counts its
#   units' decisions, so an item decided while the plan is made is counted once, by one of the two.
# - SQLite (the demo): the same trigger; its writers are serialised anyway.
# Units are deleted only with their plan (a source's deletion), which deletes its counts too.
# Also: the units' own index on plan goes (two others lead with it; one index fewer to fill per unit).
import django.db.models.deletion
from django.db import migrations, models

FINAL = "('complete', 'adjudicated')"
# The advisory lock's first key: the certification's (the second is the source's id).
CERT_LOCK = 4537


def _deltas(old: str, new: str, cast: str) -> list[tuple[str, str]]:
    """(count column, its change when a curation_reviewitem row goes from ``old`` to ``new``)."""
    def flag(row: str, decision: str = "") -> str:
        cond = f"{row}.status IN {FINAL}" + (f" AND {row}.final_decision = '{decision}'" if decision else "")
        return f"(({cond}){cast})"

    return [(column, f"{flag(new, decision)} - {flag(old, decision)}")
            for column, decision in (("final", ""), ("final_id", "id"), ("final_unclear", "unclear"))]


# The rows whose standing changes: decided then and not now (or the other way), or decided both
# times with another decision.
WHEN = (f"((OLD.status IN {FINAL}) <> (NEW.status IN {FINAL}) "
        f"OR (NEW.status IN {FINAL} AND OLD.final_decision <> NEW.final_decision))")


def _pg_forward() -> list[str]:
    sets = ", ".join(f"{c} = c.{c} + ({d})" for c, d in _deltas("OLD", "NEW", "::int"))
    return [
        f"""
CREATE OR REPLACE FUNCTION oodc_cert_counts_upd() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared({CERT_LOCK}, NEW.source_id::int);
    UPDATE curation_certificationstratumcount c SET {sets}
    FROM curation_certificationunit u WHERE u.item_id = NEW.id AND c.plan_id = u.plan_id AND c.stratum = u.stratum;
    RETURN NULL;
END $$;""",
        "CREATE TRIGGER oodc_cert_counts_upd AFTER UPDATE OF status, final_decision ON curation_reviewitem "
        f"FOR EACH ROW WHEN {WHEN} EXECUTE FUNCTION oodc_cert_counts_upd()",
    ]


def _sqlite_forward() -> list[str]:
    sets = ", ".join(f"{c} = {c} + ({d})" for c, d in _deltas("OLD", "NEW", ""))
    return [
        f"CREATE TRIGGER oodc_cert_counts_upd AFTER UPDATE OF status, final_decision ON curation_reviewitem WHEN {WHEN} BEGIN "
        f"UPDATE curation_certificationstratumcount SET {sets} WHERE EXISTS (SELECT 1 FROM curation_certificationunit u "
        "WHERE u.item_id = NEW.id AND u.plan_id = curation_certificationstratumcount.plan_id "
        "AND u.stratum = curation_certificationstratumcount.stratum); END",
    ]


# Every plan's strata that have units, from the rows already there (the service runs the same
# count, for one plan, when it makes a plan).
BACKFILL = (f"INSERT INTO curation_certificationstratumcount (plan_id, stratum, final, final_id, final_unclear) "
            f"SELECT u.plan_id, u.stratum, "
            f"sum(CASE WHEN r.status IN {FINAL} THEN 1 ELSE 0 END), "
            f"sum(CASE WHEN r.status IN {FINAL} AND r.final_decision = 'id' THEN 1 ELSE 0 END), "
            f"sum(CASE WHEN r.status IN {FINAL} AND r.final_decision = 'unclear' THEN 1 ELSE 0 END) "
            f"FROM curation_certificationunit u JOIN curation_reviewitem r ON r.id = u.item_id GROUP BY u.plan_id, u.stratum")


def forward(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        statements = ["LOCK TABLE curation_reviewitem IN SHARE ROW EXCLUSIVE MODE", *_pg_forward()]
    elif vendor == "sqlite":
        statements = _sqlite_forward()
    else:
        raise NotImplementedError(f"the certification counts' trigger is written for PostgreSQL and SQLite, not {vendor}")
    for sql in [*statements, BACKFILL]:
        schema_editor.execute(sql, params=None)


def backward(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        statements = ["DROP TRIGGER IF EXISTS oodc_cert_counts_upd ON curation_reviewitem", "DROP FUNCTION IF EXISTS oodc_cert_counts_upd()"]
    else:
        statements = ["DROP TRIGGER IF EXISTS oodc_cert_counts_upd"]
    for sql in statements:
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):

    dependencies = [
        ('curation', '0032_queue_counters'),
    ]

    operations = [
        migrations.CreateModel(
            name='CertificationStratumCount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('stratum', models.PositiveSmallIntegerField()),
                ('final', models.BigIntegerField(default=0, help_text='Units whose image is decided (complete or adjudicated)')),
                ('final_id', models.BigIntegerField(default=0, help_text='... decided `id`')),
                ('final_unclear', models.BigIntegerField(default=0, help_text='... decided `unclear`')),
                ('plan', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='stratum_counts',
                                           to='curation.certificationplan')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('plan', 'stratum'), name='one_count_per_certification_stratum')],
            },
        ),
        # the units' plan index duplicated the front of (plan, item) and (plan, stratum, draw); before the
        # trigger, which names the units' table (SQLite rebuilds the table to alter it)
        migrations.AlterField(
            model_name='certificationunit',
            name='plan',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='units',
                                    to='curation.certificationplan'),
        ),
        migrations.RunPython(forward, backward),
    ]
