"""Export permissions: curators create and read exports; researchers read (and download) them."""
from django.db import migrations

MODELS = ("export", "exportmember")


def grant(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    perms = Permission.objects.filter(content_type__app_label="curation")
    view = list(perms.filter(codename__in=[f"view_{m}" for m in MODELS]))
    add = list(perms.filter(codename="add_export"))
    curator, _ = Group.objects.get_or_create(name="curator")
    curator.permissions.add(*view, *add)
    researcher, _ = Group.objects.get_or_create(name="researcher")
    researcher.permissions.add(*view)


def revoke(apps, schema_editor):
    Permission = apps.get_model("auth", "Permission")
    Permission.objects.filter(content_type__app_label="curation", content_type__model__in=list(MODELS)).delete()


class Migration(migrations.Migration):
    dependencies = [("curation", "0009_exports")]
    operations = [migrations.RunPython(grant, revoke)]
