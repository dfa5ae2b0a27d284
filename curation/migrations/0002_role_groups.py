"""Role groups: annotator, curator, researcher (staff users administer through the admin)."""
from django.db import migrations

CURATOR_MODELS = ("source", "candidateclass", "image", "job", "idclassset")
READ_ONLY_MODELS = ("auditlog", "jobchunk")


def create_groups(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")

    def perms(actions, models):
        return Permission.objects.filter(
            content_type__app_label="curation",
            codename__in=[f"{a}_{m}" for a in actions for m in models],
        )

    Group.objects.get_or_create(name="annotator")
    curator, _ = Group.objects.get_or_create(name="curator")
    curator.permissions.set(list(perms(("view", "add", "change"), CURATOR_MODELS)) + list(perms(("view",), READ_ONLY_MODELS)))
    researcher, _ = Group.objects.get_or_create(name="researcher")
    researcher.permissions.set(list(perms(("view",), CURATOR_MODELS + READ_ONLY_MODELS)))


def remove_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=["annotator", "curator", "researcher"]).delete()


class Migration(migrations.Migration):
    dependencies = [("curation", "0001_initial"), ("auth", "0012_alter_user_first_name_max_length"), ("contenttypes", "0002_remove_content_type_name")]
    operations = [migrations.RunPython(create_groups, remove_groups)]
