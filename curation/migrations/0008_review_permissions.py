"""Review permissions: curators configure review (settings, annotator scopes) and read the queue
and its reviews; researchers read them. Annotators work only through the review screen."""
from django.db import migrations

CURATOR_ALL = ("reviewsettings", "annotatorscope")
READ = ("reviewitem", "review", "assignment", "synsettext")


def grant(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    perms = Permission.objects.filter(content_type__app_label="curation")
    view = list(perms.filter(codename__in=[f"view_{m}" for m in READ]))
    manage = list(perms.filter(codename__in=[f"{a}_{m}" for a in ("add", "change", "delete", "view") for m in CURATOR_ALL]))
    curator, _ = Group.objects.get_or_create(name="curator")
    curator.permissions.add(*view, *manage)
    researcher, _ = Group.objects.get_or_create(name="researcher")
    researcher.permissions.add(*view)


def revoke(apps, schema_editor):
    Permission = apps.get_model("auth", "Permission")
    Permission.objects.filter(content_type__app_label="curation", content_type__model__in=list(CURATOR_ALL + READ)).delete()


class Migration(migrations.Migration):
    dependencies = [("curation", "0007_review")]
    operations = [migrations.RunPython(grant, revoke)]
