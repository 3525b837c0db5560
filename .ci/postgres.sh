#!/usr/bin/env bash
# Starts a throwaway PostgreSQL server for the store tests and prints the
# `export OCELLI_TEST_POSTGRES=...` line to eval. The server also serves TLS
# with a throwaway CA and a certificate for localhost and 127.0.0.1; the CA's
# PEM is exported as OCELLI_TEST_PG_CA. Installs Debian's
# `postgresql` package when no server binaries are present. Runs as root (CI)
# or as a user that can become `postgres` via sudo/runuser.
#
#   eval "$(.ci/postgres.sh start)"   # prints the export line
#   .ci/postgres.sh restart
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

# A CA and a server certificate (EC P-256, two days) in $1, owned by postgres:
# the server refuses a key readable by others.
make_tls() {
  local d=$1
  mkdir -p "$d"
  cat >"$d/openssl.cnf" <<'CNF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = ocelli-ci-postgres
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
authorityKeyIdentifier = keyid
CNF
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${ec[@]}" -config "$d/openssl.cnf" -extensions ca -days 2 \
    -subj /CN=ocelli-ci-postgres-ca -keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null
  openssl req -new "${ec[@]}" -config "$d/openssl.cnf" -subj /CN=localhost \
    -keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
    -days 2 -extfile "$d/openssl.cnf" -extensions server -out "$d/server.pem" 2>/dev/null
  rm -f "$d/ca.key" "$d/server.csr" "$d/ca.srl"
  chmod 600 "$d/server.key"
  chmod 644 "$d/ca.pem" "$d/server.pem"
  chown postgres: "$d/server.key" "$d/server.pem" 2>/dev/null || true
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
    make_tls "$PGDIR/tls"
    # Durability as in production (fsync and synchronous_commit are the defaults);
    # enough connections for three nodes' pools per concurrent test. TLS is
    # offered, not required: the other tests connect in plaintext.
    as_pg "$bin/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/log" -w \
      -o "-p $PGPORT -k $PGDIR -c listen_addresses=127.0.0.1 -c max_connections=400 \
          -c ssl=on -c ssl_cert_file=$PGDIR/tls/server.pem -c ssl_key_file=$PGDIR/tls/server.key" \
      start >&2
    as_pg "$bin/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -qAt -v ON_ERROR_STOP=1 >&2 <<SQL
CREATE ROLE $ROLE LOGIN PASSWORD '$PASS' CREATEDB;
CREATE DATABASE $DB OWNER $ROLE;
SQL
  fi
  echo "export OCELLI_TEST_POSTGRES=postgres://$ROLE:$PASS@127.0.0.1:$PGPORT/$DB"
  # A server reused from before TLS was added has no CA: the TLS tests skip.
  [ -f "$PGDIR/tls/ca.pem" ] && echo "export OCELLI_TEST_PG_CA=$PGDIR/tls/ca.pem"
  return 0
}

# A restart of the running server (the fault scenarios restart it under load).
restart() {
  bin=$(pgbin)
  as_pg "$bin/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/log" -m fast -w restart >&2
}

stop() {
  bin=$(pgbin) || exit 0
  [ -d "$PGDIR/data" ] && as_pg "$bin/pg_ctl" -D "$PGDIR/data" -m fast -w stop >&2 || true
  rm -rf "$PGDIR"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  restart) restart ;;
  *) echo "usage: $0 [start|stop|restart]" >&2; exit 2 ;;
esac
