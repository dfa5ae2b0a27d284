# Issue 45: indexes for reads that grew with the pool: the certification page's gold figures (the
# answered gold reviews, 0.5% of them, not the whole review table: about 0.3 s at 13.2M images),
# an annotator's own review count, and the contamination report's sample of decided items.
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('curation', '0034_browse_at_scale'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='review',
            index=models.Index(condition=models.Q(('gold_correct__isnull', False), ('is_gold', True)), fields=['item'], name='review_gold_answered'),
        ),
        # an annotator's own (non-gold) reviews counted from the index alone
        migrations.AddIndex(
            model_name='review',
            index=models.Index(fields=['annotator', 'is_gold', 'created_at'], name='review_annotator_gold_time'),
        ),
        # the contamination report's sample: the finally decided items by position in id order
        migrations.AddIndex(
            model_name='reviewitem',
            index=models.Index(condition=models.Q(('status__in', ['complete', 'adjudicated']), models.Q(('final_decision', ''), _negated=True)), fields=['source', 'id'], name='review_item_final_by_id'),
        ),
    ]
