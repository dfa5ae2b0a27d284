# Issue 45 (a pool of ImageNet-21K's size): the image browser's review-side filters and the admin's
# image search read from indexes, not by a pass over every image (docs/benchmarks.md, issue 45).
from django.db import migrations, models

# Partial indexes of the review queue's few decided-by-a-curator items, for the browser's "with a
# note" and "decided by adjudication / curator's label" filters. ReviewItem's Meta belongs to the
# queue's own change; these are made here by SQL, which both databases take as written.
ITEM_INDEXES = [
    ("review_item_final_note", "CREATE INDEX review_item_final_note ON curation_reviewitem (image_id) WHERE final_note <> ''"),
    ("review_item_adjudicated", "CREATE INDEX review_item_adjudicated ON curation_reviewitem (image_id) WHERE status = 'adjudicated'"),
]


def _create_item_indexes(apps, schema_editor):
    for _name, sql in ITEM_INDEXES:
        schema_editor.execute(sql)


def _drop_item_indexes(apps, schema_editor):
    for name, _sql in ITEM_INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):

    dependencies = [
        ('curation', '0033_certification_at_scale'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='review',
            index=models.Index(condition=models.Q(('note', ''), _negated=True), fields=['item'], name='review_with_note'),
        ),
        migrations.AddIndex(
            model_name='image',
            index=models.Index(fields=['relative_path'], name='image_path_prefix', opclasses=['varchar_pattern_ops']),
        ),
        migrations.RunPython(_create_item_indexes, _drop_item_indexes, elidable=False),
    ]
