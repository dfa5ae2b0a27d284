from django.apps import AppConfig


class CurationConfig(AppConfig):
    name = "curation"
    verbose_name = "OOD curation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # the built-in job kinds (ingest, extraction, ..., evaluation): each stage's steps, declared
        # by its services, registered with the job protocol before any job runs
        from curation.services import job_kinds  # noqa: F401
