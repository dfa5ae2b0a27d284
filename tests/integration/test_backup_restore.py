"""Backup and restore as docs/backup.md says (issue 38): pg_dump of the running installation's
database plus a tar of its data folder, restored into a new database and another data folder;
there every export verifies (`verify_export --all`), the rows match table by table, and the
restored feature shards are read."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from curation.models import Export
from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _url(name: str) -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER']}:{s['PASSWORD']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{name}"


def _counts(url: str) -> dict:
    import psycopg2

    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
            tables = [r[0] for r in cur.fetchall()]
            out = {}
            for t in tables:
                cur.execute(f'SELECT count(*) FROM "{t}"')
                out[t] = cur.fetchone()[0]
            return out
    finally:
        conn.close()


@pytest.fixture
def installation(tmp_path, settings, role_groups):
    """A running installation's data folder under tmp_path/data: a reviewed source with
    features, a dataset export and a unit-test export."""
    from curation.services.review import review_cache_clear
    from tests.review_data import id_sets
    from tests.test_exports import reviewed_pool

    data = tmp_path / "data"
    settings.EXPORT_ROOT = data / "exports"
    settings.FEATURE_STORE = data / "features"
    settings.EVAL_ROOT = data / "evaluations"
    review_cache_clear()
    reviewed_pool(tmp_path, n=8, name="bpool", answer=lambda img: ("ood", []))
    call_command("export", "--name", "backed", "--source", "bpool", stdout=io.StringIO(), stderr=io.StringIO())
    id_sets(tmp_path, {"bref": (2, 96)})
    call_command("make_unit_tests", "--name", "backed-tests", "--per-test", "1", "--workers", "1", stdout=io.StringIO(),
                 stderr=io.StringIO())
    review_cache_clear()
    assert Export.objects.filter(status="done").count() == 2
    return data


def test_pg_dump_and_the_data_folder_restore_into_a_fresh_installation_where_every_export_verifies(installation, tmp_path):
    import psycopg2

    source_url = _url(connection.settings_dict["NAME"])
    restored_name = f"{connection.settings_dict['NAME']}_restored"
    env = {**os.environ, "PGPASSWORD": connection.settings_dict["PASSWORD"] or ""}
    # back up, as docs/backup.md says
    dump = tmp_path / "oodc.dump"
    out = subprocess.run(["pg_dump", "--format=custom", "--no-owner", f"--file={dump}", source_url], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    archive = tmp_path / "oodc-data.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(installation, arcname=".")

    # a fresh installation: a new database, another data folder
    admin = psycopg2.connect(_url("postgres"))
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{restored_name}"')
        cur.execute(f'CREATE DATABASE "{restored_name}"')
    try:
        restored_url = _url(restored_name)
        out = subprocess.run(["pg_restore", "--no-owner", f"--dbname={restored_url}", str(dump)], env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        fresh = tmp_path / "fresh-data"
        fresh.mkdir()
        with tarfile.open(archive) as tar:
            tar.extractall(fresh, filter="data")
        renv = {**os.environ, "DATABASE_URL": restored_url, "OODC_DATA_DIR": str(fresh), "NLTK_DATA": str(settings.NLTK_DATA)}
        for k in ("OODC_EXPORT_ROOT", "OODC_FEATURE_STORE", "OODC_EVAL_ROOT", "CELERY_BROKER_URL"):
            renv.pop(k, None)

        def manage(*args):
            return subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=renv, capture_output=True, text=True, timeout=600)

        migrated = manage("migrate", "--check")
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr  # a backup of this version needs no migration
        verified = manage("verify_export", "--all")
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert "all 2 finished export(s) verify" in verified.stdout
        assert _counts(restored_url) == _counts(source_url)
        features = manage("shell", "-c", "from curation.models import ImageEmbedding; from curation.services.image_pipeline import "
                                         "load_features; e = list(ImageEmbedding.objects.filter(image__source__name='bpool')); "
                                         "print(len(e), load_features(e).shape[0])")
        assert features.returncode == 0, features.stderr
        assert features.stdout.strip().splitlines()[-1].split() == ["8", "8"]

        # and a damaged restore is named: one exported file changed
        victim = next(p for p in (fresh / "exports" / "backed").rglob("*") if p.is_file() and p.suffix in (".jpg", ".png"))
        victim.write_bytes(victim.read_bytes() + b"x")
        broken = manage("verify_export", "--all")
        assert broken.returncode == 1 and "1 of 2 export(s) do not verify" in broken.stderr, broken.stderr
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{restored_name}" WITH (FORCE)')
        admin.close()
