#!/usr/bin/env bash
# Set everything up, then run the main job on the embedded default (SQLite, eager Celery, the
# bundled demo data) and serve the web app on http://127.0.0.1:8000/ with demo accounts.
# Extra arguments go to `manage.py demo` (e.g. --no-serve, --addr 0.0.0.0:8000).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python manage.py demo "$@"
