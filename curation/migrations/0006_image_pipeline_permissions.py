"""Image pipeline permissions: curators and researchers read predictions, features and signals
(workers write them; nobody edits them by hand)."""
from django.db import migrations

MODELS = ("featureshard", "imageembedding", "classvisualsignal")


def grant(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    view = list(Permission.objects.filter(content_type__app_label="curation", codename__in=[f"view_{m}" for m in MODELS]))
    for name in ("curator", "researcher"):
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(*view)


def revoke(apps, schema_editor):
    Permission = apps.get_model("auth", "Permission")
    Permission.objects.filter(content_type__app_label="curation", content_type__model__in=list(MODELS)).delete()


class Migration(migrations.Migration):
    dependencies = [("curation", "0005_image_pipeline")]
    operations = [migrations.RunPython(grant, revoke)]
