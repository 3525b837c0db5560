#!/usr/bin/env bash
# Builds the sdk-orb firmware test image for a Cortex-M7 and runs it under QEMU (mps2-an500):
# the SDK's conformance families replayed on the target, then one measured seal_envelope and
# the instructions of each of its steps; the version 2 seal measured in an image built as an
# orb's (it seals and opens nothing), and its public-key operations one by one. Prints the
# image's flash and static RAM, the stack high-water mark and the instruction count of each
# seal, and a cycle estimate. Exits non-zero if anything fails, a seal's stack exceeds its
# budget, or the version 2 seal its instruction budget.
set -euo pipefail
cd "$(dirname "$0")"

# The orb's budget for one seal_envelope.
STACK_BUDGET_BYTES=16384
# The version 2 seal's instruction budget (docs/sdk-integration.md; the goal is 9,600,000, 20 ms at
# 480 MHz). QEMU's count is exact for one build, so a change that crosses it fails here.
INSTRUCTION_BUDGET_V2=20000000

rustup target add thumbv7em-none-eabihf >/dev/null
if ! command -v qemu-system-arm >/dev/null 2>&1; then
  echo "qemu-system-arm missing: installing Debian's qemu-system-arm"
  DEBIAN_FRONTEND=noninteractive apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-system-arm
fi

# Its own workspace, so the root's `cargo fmt --all --check` does not see it.
cargo fmt --check
cargo build --release --locked -q
target_dir=$(cargo metadata --format-version 1 --no-deps --locked \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
elf="$target_dir/thumbv7em-none-eabihf/release/ocelli-sdk-embedded"
seal_only="$target_dir/thumbv7em-none-eabihf/release/ocelli-sdk-seal-only"
seal_measured="$target_dir/thumbv7em-none-eabihf/release/ocelli-sdk-seal-measured"
primitives="$target_dir/thumbv7em-none-eabihf/release/ocelli-sdk-primitives"

python3 elf_sizes.py "$elf"
# The SDK's own flash: an image that seals one person and holds no test vectors.
python3 elf_sizes.py --flash "seal-only image" "$seal_only"

# -icount shift=0: QEMU's virtual clock advances 1 ns per executed instruction, which the
# image's timer reads (and calibrates against a loop of known length).
qemu() {
  timeout 120 qemu-system-arm -machine mps2-an500 -cpu cortex-m7 -nographic -monitor none \
    -serial none -semihosting-config enable=on,target=native -icount shift=0 -kernel "$1"
}
if ! qemu "$seal_only"; then
  echo "seal-only image failed to seal" >&2
  exit 1
fi

log=$(mktemp)
measured_log=$(mktemp)
trap 'rm -f "$log" "$measured_log"' EXIT
# The version 2 seal's figures, from an image that seals as an orb's does (and opens nothing).
if ! qemu "$seal_measured" >"$measured_log" 2>&1; then
  cat "$measured_log"
  echo "seal-measured image failed to seal" >&2
  exit 1
fi
cat "$measured_log"
# The version 2 seal's public-key operations one by one.
if ! qemu "$primitives"; then
  echo "primitives image failed" >&2
  exit 1
fi
status=0
qemu "$elf" >"$log" 2>&1 || status=$?
cat "$log"
# The per-step breakdown, from its own build (the step functions would change how the seal
# inlines, and so its stack, in the image above).
cargo build --release --locked -q --features steps
steps_status=0
qemu "$elf" >"$log.steps" 2>&1 || steps_status=$?
grep -v '^seal_envelope\|passed, .* failed$' "$log.steps" || true
rm -f "$log.steps"
if [ "$steps_status" -ne 0 ]; then
  echo "the step measurement failed (QEMU exit status $steps_status)" >&2
  exit 1
fi

insns=$(sed -n 's/^seal_envelope instructions: \([0-9]*\)$/\1/p' "$log")
insns_v2=$(sed -n 's/^seal_envelope v2 instructions: \([0-9]*\)$/\1/p' "$measured_log")
# Assumption: about one instruction per cycle on the Cortex-M7 (it can dual-issue, but loads,
# multiplies and branches stall); flash wait states are not modelled.
for pair in "seal_envelope:$insns" "seal_envelope v2:$insns_v2"; do
  [ -n "${pair#*:}" ] && python3 -c "i = ${pair#*:}; print(f'${pair%%:*} cycle estimate at 480 MHz (~1 instruction per cycle): {i} cycles, {i / 480e3:.1f} ms')"
done

if [ "$status" -ne 0 ]; then
  echo "firmware run failed (QEMU exit status $status)" >&2
  exit 1
fi
if ! grep -Eq '^[0-9]+ passed, 0 failed$' "$log" || [ -z "$insns" ]; then
  echo "firmware run incomplete: no clean summary line or no measurement" >&2
  exit 1
fi
if [ -z "$insns_v2" ] || [ "$insns_v2" -gt "$INSTRUCTION_BUDGET_V2" ]; then
  echo "seal_envelope v2 takes ${insns_v2:-unmeasured} instructions, over the budget of $INSTRUCTION_BUDGET_V2" >&2
  exit 1
fi
for pair in "seal_envelope:$log" "seal_envelope v2:$measured_log"; do
  name=${pair%%:*}
  stack=$(sed -n "s/^$name stack bytes: \([0-9]*\)\$/\1/p" "${pair#*:}" | sort -n | tail -1)
  if [ -z "$stack" ] || [ "$stack" -gt "$STACK_BUDGET_BYTES" ]; then
    echo "$name stack ${stack:-unmeasured} bytes exceeds the budget of $STACK_BUDGET_BYTES" >&2
    exit 1
  fi
done
