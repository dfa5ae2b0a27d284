#!/usr/bin/env bash
# Start PostgreSQL and Redis from Debian's packages on loopback for the integration tests, and
# create the role and database the tests use. Idempotent. Prints the environment to export.
set -euo pipefail

PG_USER="${PG_USER:-oodc}"; PG_PASSWORD="${PG_PASSWORD:-oodc}"; PG_DB="${PG_DB:-oodc}"
REDIS_PORT="${REDIS_PORT:-6379}"

ver=$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -n 1)
[ -n "$ver" ] || { echo "PostgreSQL is not installed: run scripts/setup.sh --test" >&2; exit 1; }
pg_lsclusters -h 2>/dev/null | awk '{print $1" "$2}' | grep -qx "$ver main" || pg_createcluster "$ver" main >/dev/null
pg_ctlcluster "$ver" main status >/dev/null 2>&1 || pg_ctlcluster "$ver" main start
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
