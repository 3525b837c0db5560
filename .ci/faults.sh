#!/usr/bin/env bash
# The fault scenarios (node/tests/faults.rs): three `ocelli-node serve` processes in their own
# network namespaces, Toxiproxy on every link between them, packet loss with nftables, a clock
# moved with libfaketime, a full disk on a tmpfs. Installs what is missing (Debian packages;
# Toxiproxy with the Go toolchain), then runs them. Needs root (namespaces, mounts).
#
#   .ci/faults.sh        # the short set, as CI runs it (about a minute)
#   .ci/faults.sh full   # every scenario at full length (about five minutes)
#   .ci/faults.sh soak   # the bounded soak, release build: 30 minutes against 10,000 people
#
# OCELLI_FAULTS_TEST_BIN=<path> runs that test executable instead of building one.
# OCELLI_FAULTS_ONLY=<text> runs only the scenarios whose name contains it. The soak reads
# OCELLI_SOAK_MINUTES (30), OCELLI_SOAK_PEOPLE (10000), OCELLI_SOAK_RATE (requests per second,
# 1) and writes its CSV and SVG to OCELLI_SOAK_OUT (target/soak).
set -euo pipefail
cd "$(dirname "$0")/.."
length=${1:-ci}
case "$length" in ci | full | soak) ;; *) echo "usage: $0 [ci|full|soak]" >&2; exit 2 ;; esac
if [ "$(id -u)" -ne 0 ]; then
  echo "the fault scenarios need root (network namespaces, a tmpfs mount)" >&2
  exit 1
fi

missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
ls /usr/lib/*-linux-gnu/faketime/libfaketime.so.1 >/dev/null 2>&1 || missing+=(libfaketime)
if [ ${#missing[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

tools="$PWD/target/ci-faults"
if [ ! -x "$tools/toxiproxy-server" ]; then
  command -v go >/dev/null 2>&1 || PATH="$PATH:/usr/local/go/bin"
  command -v go >/dev/null 2>&1 || { echo "Toxiproxy needs a Go toolchain" >&2; exit 1; }
  mkdir -p "$tools"
  GOBIN="$tools/bin" GOPATH="$tools/gopath" GOFLAGS=-modcacherw \
    go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0
  mv "$tools/bin/server" "$tools/toxiproxy-server"
fi

# The full set restarts a PostgreSQL server under load: .ci/postgres.sh's, unless one is named.
if [ "$length" = full ] && [ -z "${OCELLI_TEST_POSTGRES:-}" ]; then
  eval "$(.ci/postgres.sh start)"
  trap '.ci/postgres.sh stop' EXIT
fi

export OCELLI_FAULTS="$length" OCELLI_TOXIPROXY_SERVER="$tools/toxiproxy-server"
if [ "$length" = soak ]; then
  cargo test --release --workspace --locked --test faults bounded_soak -- --nocapture
elif [ -n "${OCELLI_FAULTS_TEST_BIN:-}" ]; then
  # .ci/run names the executable its tests step built (.ci/test-bin), so nothing is rebuilt.
  (cd node && "$OCELLI_FAULTS_TEST_BIN" fault_scenarios --nocapture)
else
  cargo test --workspace --locked --test faults fault_scenarios -- --nocapture
fi
