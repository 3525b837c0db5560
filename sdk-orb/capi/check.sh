#!/usr/bin/env bash
# Builds the C interface as a static library, compiles examples/seal_fixture.c against it
# with the host C compiler, seals the fixture person through C and through Rust (the same
# keys and seeded ChaCha20 stream), as envelope version 1 and version 2, and compares the
# C and Rust envelopes of each version byte for byte.
set -euo pipefail
cd "$(dirname "$0")/../.."

cargo build --release --locked -q -p ocelli-sdk-capi --features test-rng --lib --example seal_fixture
target_dir=$(cargo metadata --format-version 1 --no-deps --locked \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
lib="$target_dir/release/libocelli_sdk_capi.a"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The native libraries a Rust std staticlib needs on Linux.
"${CC:-cc}" -std=c99 -Wall -Wextra -Werror -O2 -DOCELLI_TEST_RNG -I sdk-orb/capi/include \
  sdk-orb/capi/examples/seal_fixture.c "$lib" -lpthread -ldl -lm -o "$work/seal_fixture_c"

left=sdk-orb/examples/data/left.json
right=sdk-orb/examples/data/right.json
echo "C:    $("$work/seal_fixture_c" "$left" "$right" "$work/c.envelope" "$work/c.v2.envelope")"
echo "Rust: $("$target_dir/release/examples/seal_fixture" "$left" "$right" "$work/rust.envelope" "$work/rust.v2.envelope")"
for v in "" .v2; do
  cmp "$work/c$v.envelope" "$work/rust$v.envelope"
  echo "C and Rust envelopes$v identical ($(wc -c <"$work/c$v.envelope") bytes, sha256 $(sha256sum "$work/c$v.envelope" | cut -c1-16)...)"
done
