"""The Celery application. Workers: ``celery -A curation worker -Q cpu`` (and ``-Q gpu``)."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "curation.settings")

app = Celery("curation")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
