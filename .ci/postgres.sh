#!/usr/bin/env bash
# Starts a throwaway PostgreSQL server for the store tests and prints the
# `export OCELLI_TEST_POSTGRES=...` line to eval. Installs Debian's
# `postgresql` package when no server binaries are present. Runs as root (CI)
# or as a user that can become `postgres` via sudo/runuser.
#
#   eval "$(.ci/postgres.sh start)"   # prints the export line
#   .ci/postgres.sh stop
set -euo pipefail

PGDIR="${OCELLI_PG_DIR:-${TMPDIR:-/tmp}/ocelli-ci-postgres}"
PGPORT="${OCELLI_PG_PORT:-55432}"
ROLE=ocelli
PASS=ocelli-ci
DB=ocelli_test

pgbin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && { echo "$d"; return 0; }
  done
  return 1
}

as_pg() {
  if [ "$(id -un)" = postgres ]; then "$@"
  elif command -v runuser >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"
  else sudo -u postgres "$@"; fi
}

start() {
  if ! bin=$(pgbin); then
    echo "installing postgresql" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq postgresql >&2
    bin=$(pgbin)
  fi
  if [ -f "$PGDIR/data/postmaster.pid" ] && as_pg "$bin/pg_ctl" -D "$PGDIR/data" status >/dev/null 2>&1; then
    echo "reusing the server in $PGDIR" >&2
    PGPORT=$(cat "$PGDIR/port")
  else
    rm -rf "$PGDIR"
    mkdir -p "$PGDIR"
    # Another server may hold the port (shared machines): take the next free one.
    while (exec 3<>"/dev/tcp/127.0.0.1/$PGPORT") 2>/dev/null; do PGPORT=$((PGPORT + 1)); done
    echo "$PGPORT" >"$PGDIR/port"
    chown postgres: "$PGDIR" 2>/dev/null || true
    as_pg "$bin/initdb" -D "$PGDIR/data" -A trust -U postgres >/dev/null
    # Durability as in production (fsync and synchronous_commit are the defaults);
    # enough connections for three nodes' pools per concurrent test.
    as_pg "$bin/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/log" -w \
      -o "-p $PGPORT -k $PGDIR -c listen_addresses=127.0.0.1 -c max_connections=400" start >&2
    as_pg "$bin/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -qAt -v ON_ERROR_STOP=1 >&2 <<SQL
CREATE ROLE $ROLE LOGIN PASSWORD '$PASS' CREATEDB;
CREATE DATABASE $DB OWNER $ROLE;
SQL
  fi
  echo "export OCELLI_TEST_POSTGRES=postgres://$ROLE:$PASS@127.0.0.1:$PGPORT/$DB"
}

stop() {
  bin=$(pgbin) || exit 0
  [ -d "$PGDIR/data" ] && as_pg "$bin/pg_ctl" -D "$PGDIR/data" -m fast -w stop >&2 || true
  rm -rf "$PGDIR"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 [start|stop]" >&2; exit 2 ;;
esac
