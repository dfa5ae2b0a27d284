from django.db import migrations, models


class Migration(migrations.Migration):
    """Sources in any registered layout (pipelines/sources/layouts/): the source's layout and its
    options, and where each image's bytes lie in its archive."""

    dependencies = [("curation", "0027_grid_preference")]

    operations = [
        migrations.AddField(
            model_name="source", name="layout",
            field=models.CharField(db_default="folder", default="folder", max_length=32,
                                   help_text="How the root holds its images (pipelines/sources/layouts/): folder, class-tars, wds, parquet"),
        ),
        migrations.AddField(
            model_name="source", name="layout_options",
            field=models.JSONField(blank=True, default=dict,
                                   help_text="The layout's options, and the published list a source was made from (path, format, sha256)"),
        ),
        migrations.AddField(
            model_name="image", name="container",
            field=models.CharField(blank=True, db_default="", default="", max_length=1024,
                                   help_text="The archive that holds it, relative to the root ('' for a plain file)"),
        ),
        migrations.AddField(
            model_name="image", name="offset",
            field=models.BigIntegerField(db_default=-1, default=-1, help_text="tar: its data offset; Parquet: its row; -1: a plain file"),
        ),
        migrations.AlterField(
            model_name="image", name="relative_path",
            field=models.CharField(max_length=1024, help_text="The member's path in the source: a file under the root, or <archive>/<member>"),
        ),
        migrations.AlterField(
            model_name="source", name="root",
            field=models.CharField(max_length=1024, help_text="Absolute folder: ROOT/<class folder>/<image files>, or the archives' folder"),
        ),
    ]
