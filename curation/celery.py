"""The Celery application. Workers: ``celery -A curation worker -Q cpu`` (and ``-Q gpu``)."""
import os

from celery import Celery
from celery.signals import worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "curation.settings")

app = Celery("curation")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _start_stale_sweep(**_kwargs):
    """Each worker resumes jobs whose worker died (curation/jobs/stale.py)."""
    from curation.jobs.stale import start_sweeper

    start_sweeper()


@worker_shutdown.connect
def _stop_stale_sweep(**_kwargs):
    from curation.jobs.stale import stop_sweeper

    stop_sweeper()
