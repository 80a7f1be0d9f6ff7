#!/usr/bin/env bash
# Builds the library, the tools and the tests with AddressSanitizer and UndefinedBehaviorSanitizer
# into build-asan/ and runs the suite there: every process a test starts (ranks, launchers, the
# install test's own project) is built and checked alike, and any finding fails its test.
#   scripts/sanitize.sh [ctest arguments, e.g. -R 'Checkpoint\.']
# LeakSanitizer runs too, with no suppressions.
set -euo pipefail
cd "$(dirname "$0")/.."
# GCC's -Wmaybe-uninitialized misfires on libstdc++'s own <regex> and <functional> under ASan.
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -Wno-maybe-uninitialized"
# CMake takes these for the first configure of every project, the install test's consumer included.
export CXXFLAGS="$flags" LDFLAGS="-fsanitize=address,undefined"
# allocator_may_return_null: an allocation too large for the machine fails as it does without ASan
# (LibTorch's allocator throws "not enough memory", which the batch-size finder's tests provoke).
# handle_segv=0: a rank that segfaults dies of SIGSEGV, as the launcher tests that raise it expect.
export ASAN_OPTIONS="detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1:allocator_may_return_null=1:handle_segv=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
generator=()
if [ ! -f build-asan/CMakeCache.txt ] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
cmake -S . -B build-asan "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DARC_BUILD_TESTS=ON \
  -DARC_BUILD_BENCH=ON
started=$SECONDS
cmake --build build-asan -j "$(nproc)"
built=$SECONDS
status=0
ctest --test-dir build-asan --output-on-failure -j "$(nproc)" "$@" || status=$?
echo "sanitize.sh: build $((built - started)) s, tests $((SECONDS - built)) s" >&2
exit $status
