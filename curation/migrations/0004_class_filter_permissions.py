"""Class filter permissions: curators run the filter, resolve flags and pin overrides;
researchers read."""
from django.db import migrations

CURATOR = {
    "classfilterrun": ("view", "add"),
    "classdecision": ("view", "change"),
    "classoverride": ("view", "add", "change", "delete"),
}


def grant(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")

    def perms(pairs):
        return list(Permission.objects.filter(content_type__app_label="curation", codename__in=[f"{a}_{m}" for m, actions in pairs.items() for a in actions]))

    curator, _ = Group.objects.get_or_create(name="curator")
    curator.permissions.add(*perms(CURATOR))
    researcher, _ = Group.objects.get_or_create(name="researcher")
    researcher.permissions.add(*perms({m: ("view",) for m in CURATOR}))


def revoke(apps, schema_editor):
    Permission = apps.get_model("auth", "Permission")
    Permission.objects.filter(content_type__app_label="curation", content_type__model__in=list(CURATOR)).delete()


class Migration(migrations.Migration):
    dependencies = [("curation", "0003_class_filter")]
    operations = [migrations.RunPython(grant, revoke)]
