from django.apps import AppConfig


class CurationConfig(AppConfig):
    name = "curation"
    verbose_name = "OOD curation"
    default_auto_field = "django.db.models.BigAutoField"
