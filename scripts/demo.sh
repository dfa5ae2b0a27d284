#!/usr/bin/env bash
# Set everything up, then run the main job on the embedded default (SQLite, eager Celery, the
# demo data built from real photos) and serve the web app on http://127.0.0.1:8000/ with demo
# accounts. Extra arguments go to `manage.py demo` (e.g. --no-serve, --addr 0.0.0.0:8000).
set -euo pipefail
cd "$(dirname "$0")/.."
for arg in "$@"; do
  case "$arg" in
    -h|--help)  # answered without setting anything up
      if [ -x .venv/bin/python ] && .venv/bin/python -c 'import django' 2>/dev/null; then
        exec .venv/bin/python manage.py demo --help
      fi
      cat <<'USAGE'
usage: bash scripts/demo.sh [--no-serve] [--addr HOST:PORT] [--data DIR] [--per-class N] [--unit-tests N]

Sets everything up (apt packages, .venv, WordNet, the database; a few minutes the first time),
then runs `python manage.py demo`: builds the demo data from real photos, runs every stage on it,
prints what the numbers mean and serves the web app on http://127.0.0.1:8000/.
  --no-serve        stop after the summary
  --addr HOST:PORT  where to serve (default 127.0.0.1:8000)
  --data DIR        where to write the demo's sources (default $OODC_DATA_DIR/demo)
  --per-class N     composites per candidate class (default 6, about 1,400 images; 12 builds the full pool)
  --unit-tests N    images per OOD unit test (default 5)
More: docs/demo.md
USAGE
      exit 0 ;;
  esac
done
bash scripts/setup.sh
exec .venv/bin/python manage.py demo "$@"
