#!/usr/bin/env bash
# Install everything the toolkit needs on Debian 12 with Python 3.11 (run as root, or with sudo):
# apt packages, a virtualenv in .venv with requirements.txt, WordNet 3.0 for NLTK, the database.
#   scripts/setup.sh          what the app needs
#   scripts/setup.sh --test   plus PostgreSQL, Redis and Chromium for the test suite
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[ "${1:-}" = "--test" ] && want_test=1

SUDO=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"

# Each step says what it installs and how long it took; the total comes at the end.
started=$SECONDS
timed() {
  local what="$1" t=$SECONDS
  shift
  echo "==> $what"
  "$@"
  echo "    done in $((SECONDS - t)) s"
}

# the one list of system packages, shared with the Dockerfile: scripts/system-packages.txt
if [ "$want_test" = 1 ]; then pkgs=$(sh scripts/system-packages.sh --test); else pkgs=$(sh scripts/system-packages.sh); fi
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  apt_install() {
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
  }
  timed "apt-get install$missing" apt_install
fi

PY="${PYTHON:-python3}"
"$PY" -c 'import sys; sys.exit(0 if sys.version_info[:2] >= (3, 11) else 1)' \
  || { echo "Python >= 3.11 is required (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2; exit 1; }
if [ ! -x .venv/bin/python ]; then
  timed "creating .venv" "$PY" -m venv .venv
fi
# pip unpacks torch's CUDA build (about 5.5 GB installed) through a temporary folder: keep it
# beside .venv, on the disk that must hold the result anyway, not on /tmp (a small tmpfs on some
# machines), and keep no second copy of the wheels in pip's cache.
# The installed packages take about 7 GB (requirements.txt and requirements-dev.txt, measured).
export PIP_NO_CACHE_DIR=1
pip_tmp="$PWD/.venv/.pip-tmp"
need_gb=8
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  free_kb=$(df -Pk . | awk 'NR == 2 {print $4}')
  if [ "${free_kb:-0}" -lt $((need_gb * 1024 * 1024)) ]; then
    echo "setup: $(df -Ph . | awk 'NR == 2 {print $4}') free on the disk of $PWD; the Python packages need about ${need_gb} GB: free some space (or clone onto a larger disk) and run this again" >&2
    exit 1
  fi
  pip_install() {
    mkdir -p "$pip_tmp"
    TMPDIR="$pip_tmp" .venv/bin/pip install -q --upgrade pip
    TMPDIR="$pip_tmp" .venv/bin/pip install -q -r requirements.txt
    rm -rf "$pip_tmp"
  }
  timed "pip install -r requirements.txt (torch, timm, Django, faiss...: about 2-3 minutes the first time)" pip_install
  echo "$want" > "$stamp"
fi
if [ "$want_test" = 1 ]; then
  dev_stamp=.venv/.requirements-dev.sha256
  dev_want=$(sha256sum requirements-dev.txt | cut -d' ' -f1)
  if [ "$(cat "$dev_stamp" 2>/dev/null)" != "$dev_want" ]; then
    dev_install() {
      mkdir -p "$pip_tmp"
      TMPDIR="$pip_tmp" .venv/bin/pip install -q -r requirements-dev.txt
      rm -rf "$pip_tmp"
    }
    timed "pip install -r requirements-dev.txt (ruff, import-linter, mypy)" dev_install
    echo "$dev_want" > "$dev_stamp"
  fi
fi

timed "WordNet 3.0 for NLTK" .venv/bin/python manage.py setup_wordnet
timed "database migrations" .venv/bin/python manage.py migrate --noinput -v 0
echo "==> set-up done in $((SECONDS - started)) s"
