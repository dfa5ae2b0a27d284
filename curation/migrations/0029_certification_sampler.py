"""Issue 50: a certification plan records the sampler that drew it. Plans stored before this
migration were drawn by sampler 1 (pipelines.review.certify.SAMPLERS) and keep it, so their stored
order still replays from the seed; plans made from now on default to sampler 2."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("curation", "0028_source_layouts"),
    ]

    operations = [
        migrations.AddField(
            model_name="certificationplan",
            name="sampler",
            field=models.PositiveSmallIntegerField(default=1),
        ),
        migrations.AlterField(
            model_name="certificationplan",
            name="sampler",
            field=models.PositiveSmallIntegerField(
                default=2,
                help_text="The sampler that drew the plan's stratum orders and pilot (pipelines.review.certify.SAMPLERS): 1 before issue 50, "
                          "2 since; each later stage records its own in allocation"),
        ),
    ]
