"""Django on a fresh SQLite database in a temp folder, for the benchmarks that time in-process
work without services (bench_ingest.py, bench_sources.py)."""
from __future__ import annotations

import os
from pathlib import Path


def django_in(work: Path) -> None:
    """Point the app's data folder at ``work/data`` (no DATABASE_URL, no broker: SQLite and
    inline jobs), set Django up and migrate."""
    os.environ["OODC_DATA_DIR"] = str(work / "data")
    os.environ.setdefault("NLTK_DATA", str(Path(__file__).resolve().parent.parent / "var" / "nltk_data"))
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("CELERY_BROKER_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "curation.settings")
    import django

    django.setup()
    from django.core.management import call_command

    (work / "data").mkdir(parents=True, exist_ok=True)
    call_command("migrate", verbosity=0)
