# The queue table's foreign keys to its source and class lose their own indexes: (source, status) and
# (candidate_class, status) lead with them, and each index is written on every update of a row (issue 45).
# The indexes are dropped by name rather than by AlterField: on SQLite AlterField remakes the table,
# which its triggers (migration 0032) do not survive.

import django.db.models.deletion
from django.db import migrations, models

DROPPED = (("curation_reviewitem_source_id_bda1217e", "source_id"),
           ("curation_reviewitem_candidate_class_id_e913f04e", "candidate_class_id"))


class Migration(migrations.Migration):

    dependencies = [
        ('curation', '0035_review_gold_index'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='reviewitem',
                    name='candidate_class',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE,
                                            related_name='review_items', to='curation.candidateclass'),
                ),
                migrations.AlterField(
                    model_name='reviewitem',
                    name='source',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='review_items',
                                            to='curation.source'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(f'DROP INDEX IF EXISTS "{name}"', f'CREATE INDEX "{name}" ON "curation_reviewitem" ("{column}")')
                for name, column in DROPPED
            ],
        ),
    ]
