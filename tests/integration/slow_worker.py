"""A real `celery -A curation worker`, with one function of the code slowed down so that a test
can kill the worker in the middle of a step (the code under test is not changed otherwise).

    python tests/integration/slow_worker.py MODULE:FUNCTION SECONDS -- <celery worker arguments>

The patch is made before Celery forks its pool, so the worker's children carry it."""
import importlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "curation.settings")

import django  # noqa: E402

django.setup()

target, seconds, sep, *celery_args = sys.argv[1:]
assert sep == "--", __doc__
module_name, function_name = target.split(":")
module = importlib.import_module(module_name)
original = getattr(module, function_name)


def slowed(*args, **kwargs):
    time.sleep(float(seconds))
    return original(*args, **kwargs)


setattr(module, function_name, slowed)

from celery.bin.celery import main  # noqa: E402

sys.argv = ["celery", "-A", "curation", *celery_args]
sys.exit(main())
