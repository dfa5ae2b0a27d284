#!/usr/bin/env bash
# Start PostgreSQL and Redis from Debian's packages on loopback for the integration tests, and
# create the role and database the tests use. Idempotent. Prints the environment to export.
# --print-pg-config: print the PostgreSQL settings it writes (conf.d/50-oodc.conf) and stop.
set -euo pipefail

PG_USER="${PG_USER:-oodc}"; PG_PASSWORD="${PG_PASSWORD:-oodc}"; PG_DB="${PG_DB:-oodc}"
REDIS_PORT="${REDIS_PORT:-6379}"

ver=$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -n 1)
[ -n "$ver" ] || { echo "PostgreSQL is not installed: run scripts/setup.sh --test" >&2; exit 1; }
# The buffer pool: a quarter of the memory, at most 8 GB (PostgreSQL's own advice; Debian's
# default, 128 MB, is for small installs). At ImageNet-21K's size the queue's indexes are larger
# than 128 MB, and a rebuild's batches then read and write an index page per row from disk: 1.5x
# slower per row at 13.2M images than at 1M (docs/benchmarks.md, issue 45). Override with
# OODC_PG_SHARED_BUFFERS=2GB (any size PostgreSQL reads).
if [ -n "${OODC_PG_SHARED_BUFFERS:-}" ]; then
  buffers="$OODC_PG_SHARED_BUFFERS"
else
  mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
  # in a container, its memory limit where that is lower (cgroup v2, then v1)
  for f in /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes; do
    lim=$(cat "$f" 2>/dev/null || true)
    if [[ "$lim" =~ ^[0-9]+$ ]] && [ $(( lim / 1048576 )) -lt "$mem_mb" ]; then mem_mb=$(( lim / 1048576 )); fi
  done
  buffers_mb=$(( mem_mb / 4 )); [ "$buffers_mb" -gt 8192 ] && buffers_mb=8192; [ "$buffers_mb" -lt 128 ] && buffers_mb=128
  buffers="${buffers_mb}MB"
fi
want="# written by scripts/services.sh (OODC_PG_SHARED_BUFFERS overrides)
shared_buffers = '$buffers'"
[ "${1:-}" = "--print-pg-config" ] && { printf '%s\n' "$want"; exit 0; }
pg_lsclusters -h 2>/dev/null | awk '{print $1" "$2}' | grep -qx "$ver main" || pg_createcluster "$ver" main >/dev/null
conf_dir="/etc/postgresql/$ver/main/conf.d"
mkdir -p "$conf_dir"
if [ "$(cat "$conf_dir/50-oodc.conf" 2>/dev/null)" != "$want" ]; then
  printf '%s\n' "$want" > "$conf_dir/50-oodc.conf"
  chown postgres:postgres "$conf_dir/50-oodc.conf" 2>/dev/null || true
  # a new buffer pool needs a restart: only when the setting changed
  pg_ctlcluster "$ver" main status >/dev/null 2>&1 && { echo "PostgreSQL: shared_buffers = $buffers (restarting)"; pg_ctlcluster "$ver" main restart; }
fi
pg_ctlcluster "$ver" main status >/dev/null 2>&1 || pg_ctlcluster "$ver" main start \
  || { echo "PostgreSQL $ver did not start with shared_buffers = $buffers: set OODC_PG_SHARED_BUFFERS lower (e.g. 256MB) and run this again" >&2; exit 1; }
for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 && break; sleep 1; done
pg_isready -q -h 127.0.0.1 || { echo "PostgreSQL did not start (pg_ctlcluster $ver main start)" >&2; exit 1; }
as_pg() { su postgres -c "$1"; }
as_pg "psql -tAc \"SELECT 1 FROM pg_roles WHERE rolname='$PG_USER'\"" | grep -q 1 \
  || as_pg "psql -qc \"CREATE USER $PG_USER WITH PASSWORD '$PG_PASSWORD' CREATEDB\""
as_pg "psql -tAc \"SELECT 1 FROM pg_database WHERE datname='$PG_DB'\"" | grep -q 1 \
  || as_pg "createdb -O $PG_USER $PG_DB"

if ! redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --daemonize yes --save '' --appendonly no >/dev/null
  for _ in $(seq 1 30); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.5; done
fi
redis-cli -p "$REDIS_PORT" ping >/dev/null || { echo "Redis did not start on port $REDIS_PORT" >&2; exit 1; }
echo "PostgreSQL $ver and Redis are up:"
echo "  export DATABASE_URL=postgres://$PG_USER:$PG_PASSWORD@127.0.0.1:5432/$PG_DB"
echo "  export CELERY_BROKER_URL=redis://127.0.0.1:$REDIS_PORT/0"
