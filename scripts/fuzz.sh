#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/) as libFuzzer executables with AddressSanitizer and
# UndefinedBehaviorSanitizer (clang, into build-fuzz/) and runs each for a given time, from seeds
# that this build writes and the inputs kept in fuzz/regressions/. An input slower than 1 s or
# using more than 2 GB, a crash, a leak, a sanitizer's report or an exception other than arc::Error
# stops the run; the input is written to build-fuzz/findings/, and each target's output to
# build-fuzz/logs/<target>.log.
#   scripts/fuzz.sh [seconds per target (900)] [target ...]   targets: checkpoint weights config
#                                                              command_line cluster (default: all)
# FUZZ_JOBS=<n> runs n targets at once (default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-900}
[[ "$seconds" =~ ^[0-9]+$ && "${FUZZ_JOBS:-1}" =~ ^[1-9][0-9]*$ ]] ||
  { echo "usage: [FUZZ_JOBS=<n>] scripts/fuzz.sh [seconds] [target ...]" >&2; exit 2; }
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(checkpoint weights config command_line cluster)
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
generator=()
if [ ! -f build-fuzz/CMakeCache.txt ] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
cmake -S . -B build-fuzz "${generator[@]}" -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DARC_BUILD_TESTS=OFF -DARC_BUILD_BENCH=OFF -DARC_BUILD_FUZZERS=ON \
  -DCMAKE_CXX_FLAGS="$flags" >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target arc_fuzz_seeds "${targets[@]/#/arc_fuzz_}"
rm -rf build-fuzz/seeds
build-fuzz/fuzz/arc_fuzz_seeds build-fuzz/seeds
export ASAN_OPTIONS="detect_leaks=1:check_initialization_order=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
mkdir -p build-fuzz/findings build-fuzz/logs
# One target for the given time, its output in its log; the summary lines on the terminal.
fuzz() {
  local target=$1 kept=() code=0
  mkdir -p "build-fuzz/corpus/$target"
  [ -d "fuzz/regressions/$target" ] && kept=("fuzz/regressions/$target")
  # The first folder collects the inputs that reach new code; the others are read.
  "build-fuzz/fuzz/arc_fuzz_$target" -max_total_time="$seconds" -timeout=1 -rss_limit_mb=2048 \
    -malloc_limit_mb=2048 -close_fd_mask=1 -print_final_stats=1 -artifact_prefix="build-fuzz/findings/$target-" \
    "build-fuzz/corpus/$target" "build-fuzz/seeds/$target" "${kept[@]}" >"build-fuzz/logs/$target.log" 2>&1 || code=$?
  echo "fuzz.sh: $target: exit $code; $(grep -E '^#[0-9]+.*DONE' "build-fuzz/logs/$target.log" | tail -1)" >&2
  return $code
}
# Ending the script ends the fuzzers it started.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
status=0
running=0
for target in "${targets[@]}"; do
  echo "fuzz.sh: $target for $seconds s" >&2
  fuzz "$target" &
  running=$((running + 1))
  if [ "$running" -ge "${FUZZ_JOBS:-1}" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
exit $status
