#!/usr/bin/env bash
# Set everything up (apt packages, .venv, WordNet, PostgreSQL, Redis, Chromium) and run the whole
# test suite: unit, integration (real PostgreSQL, Redis and Celery workers), slow and browser tests.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
bash scripts/services.sh
export DATABASE_URL="${TEST_DATABASE_URL:-postgres://oodc:oodc@127.0.0.1:5432/oodc}"
export TEST_REDIS_URL="${TEST_REDIS_URL:-redis://127.0.0.1:6379/15}"
unset CELERY_BROKER_URL  # the test process runs eagerly; integration tests start real workers
# the code checks first (seconds): lint, the import contracts (.importlinter), types of pipelines/
echo "==> ruff check, lint-imports, mypy"
.venv/bin/ruff check .
.venv/bin/lint-imports --no-cache
.venv/bin/mypy
# on ${OODC_TEST_WORKERS:-2} processes (pytest-xdist), a test file at a time on one of them (tests/conftest.py
# gives each process its own test database, Redis database and data folders); -n 0 runs them in this one
set +e
.venv/bin/python -m pytest -n "${OODC_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
rc=$?
set -e
[ "$rc" = 5 ] && { echo "pytest collected no tests" >&2; exit 1; }
exit "$rc"
