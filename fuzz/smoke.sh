#!/usr/bin/env bash
# Fuzz smoke run for CI: each target for a short time on its checked-in seed corpus.
#
# Runs only where the nightly toolchain and cargo-fuzz are installed; otherwise it says
# plainly that it skips, and why, and exits 0. A crash, a failed build, a timeout, or a single
# allocation over 1 MiB inside a target (-malloc_limit_mb=1: the stated allocation bound for
# every target; the largest legitimate ones are the 230,854-byte envelope buffer and, in
# orb_request, the decoded SubmitRequest's copy of the envelope, about as large) fails the run
# (non-zero exit); the offending input is left in fuzz/artifacts/.
#
# SMOKE_BUILD=--dev builds without optimizations (CI: the optimized build of the node's
# dependency tree took about 390 of the step's 480 s on two cores; a smoke run needs coverage
# of the seeds, not speed).
#
#   fuzz/smoke.sh                 # every target, 30 s each, optimized
#   SMOKE_SECONDS=5 fuzz/smoke.sh template_json
set -euo pipefail

cd "$(dirname "$0")"
seconds="${SMOKE_SECONDS:-30}"
build="${SMOKE_BUILD:---release}"
case "$build" in --release | --dev) ;; *) echo "SMOKE_BUILD must be --release or --dev" >&2; exit 2 ;; esac
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
    targets=(template_json envelope payload peer_message orb_request config)
fi

if ! command -v rustup >/dev/null 2>&1; then
    echo "fuzz smoke run SKIPPED: rustup is not on PATH, so no nightly toolchain can be selected" \
         "(cargo-fuzz needs nightly)"
    exit 0
fi
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "fuzz smoke run SKIPPED: the nightly Rust toolchain is not installed (cargo-fuzz needs it;" \
         "install with: rustup toolchain install nightly)"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz smoke run SKIPPED: cargo-fuzz is not installed" \
         "(install with: cargo +nightly install cargo-fuzz --locked)"
    exit 0
fi

echo "fuzz smoke run: ${targets[*]}, ${seconds} s each, ${build#--} build, $(cargo +nightly fuzz --version)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
if ! cargo +nightly fuzz build "$build" >"$scratch/build.log" 2>&1; then
    cat "$scratch/build.log"
    echo "fuzz smoke run FAILED: the fuzz targets do not build"
    exit 1
fi
failed=()
for target in "${targets[@]}"; do
    # New inputs go to a scratch directory; the checked-in corpus is only read.
    mkdir -p "$scratch/$target"
    echo "== $target"
    status=0
    cargo +nightly fuzz run "$build" "$target" "$scratch/$target" "corpus/$target" -- \
        -max_total_time="$seconds" -malloc_limit_mb=1 -rss_limit_mb=1024 \
        -print_final_stats=1 >"$scratch/$target.log" 2>&1 || status=$?
    # libFuzzer's progress lines are noise here; keep the summary and any crash report.
    grep -E '^(Done|stat::number_of_executed_units|stat::average_exec_per_sec|INFO: seed corpus|SUMMARY|==[0-9]+==|thread .* panicked|Failing input|artifact_prefix)' \
        "$scratch/$target.log" || true
    if [ "$status" -ne 0 ]; then
        tail -n 40 "$scratch/$target.log"
        failed+=("$target")
    fi
done
if [ "${#failed[@]}" -ne 0 ]; then
    echo "fuzz smoke run FAILED: ${failed[*]} (inputs in fuzz/artifacts/<target>/)"
    exit 1
fi
echo "fuzz smoke run passed: ${targets[*]}"
