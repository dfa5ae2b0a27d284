"""Evaluation permissions: researchers start and read evaluation runs and read cached outputs
(and the exports and sources they evaluate on); curators read runs."""
from django.db import migrations

MODELS = ("evaluationrun", "evalfeatureset")


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
    researcher, _ = Group.objects.get_or_create(name="researcher")
    researcher.permissions.add(*view, *perms.filter(codename__in=["add_evaluationrun", "view_source"]))
    curator, _ = Group.objects.get_or_create(name="curator")
    curator.permissions.add(*perms.filter(codename="view_evaluationrun"))


def revoke(apps, schema_editor):
    Permission = apps.get_model("auth", "Permission")
    Permission.objects.filter(content_type__app_label="curation", content_type__model__in=list(MODELS)).delete()


class Migration(migrations.Migration):
    dependencies = [("curation", "0011_evaluation")]
    operations = [migrations.RunPython(grant, revoke)]
