# Issue 45 (a pool of ImageNet-21K's size). Reserved for one change; filled by it.
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('curation', '0034_browse_at_scale'),
    ]

    operations: list = []
