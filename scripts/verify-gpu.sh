#!/usr/bin/env bash
# On a GPU machine that has PyTorch with CUDA (its LibTorch, CUDA and NCCL) but none of our Debian
# packages: builds Arclight against that LibTorch and the folder made by scripts/gpu-deps.sh, runs
# the test suite and the GPU benchmark. Every CUDA test runs first; then the CPU tests with the GPU
# hidden (accelerator "auto" would take it, and they compare against CPU results); then every test
# that skipped with it hidden, with it visible.
#   scripts/verify-gpu.sh [deps folder=.gpu-deps] [steps=build,test,bench]
# ARC_TESTS (a ctest -R regex) narrows the CPU pass to the tests it names; the CUDA pass runs whole.
# A test that runs past ARC_TEST_TIMEOUT seconds (default 300) fails instead of holding the machine.
# Logs go to $OUT when it is set (the device tool's output folder), else to build-gpu/logs.
# TORCH_PREFIX overrides the LibTorch CMake prefix read from python3 (ARC_BENCH_PYTHON, if set).
set -euo pipefail
cd "$(dirname "$0")/.."
deps=$(realpath "${1:-.gpu-deps}")
steps=${2:-build,test,bench}
logs=${OUT:-build-gpu/logs}
python=${ARC_BENCH_PYTHON:-python3}
mkdir -p "$logs"
[ -d "$deps/root/usr" ] || { echo "verify-gpu: $deps has no root/usr; make it here with scripts/gpu-deps.sh" >&2; exit 2; }
prefix=$deps/root/usr
export PATH=$prefix/bin:$PATH
export LD_LIBRARY_PATH=$prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

if [[ $steps == *build* ]]; then
  torch_prefix=${TORCH_PREFIX:-$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)}
  [ -n "$torch_prefix" ] || {
    echo "verify-gpu: $python does not import torch; set ARC_BENCH_PYTHON to a python3 with PyTorch," \
      "or TORCH_PREFIX to a LibTorch's CMake prefix" >&2
    exit 2
  }
  # c10d's Gloo header needs Gloo's: a LibTorch prefix has them in include/, a pip PyTorch (whose
  # prefix is torch/share/cmake) in torch/include/.
  flags=()
  if [ ! -d "$torch_prefix/include/gloo" ] && [ ! -d "$torch_prefix/../../include/gloo" ]; then
    echo "verify-gpu: the LibTorch at $torch_prefix has no Gloo headers; using Debian's, which must match its Gloo"
    flags+=("-DCMAKE_CXX_FLAGS=-isystem $deps/gloo/usr/include")
  fi
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=$prefix;$torch_prefix" "${flags[@]}" \
    2>&1 | tee "$logs/configure.log"
  if ! cmake --build build-gpu -j "$(nproc)" >"$logs/build.log" 2>&1; then
    grep -E -A3 "error:" "$logs/build.log" | head -n 60 >&2 || tail -n 30 "$logs/build.log" >&2
    echo "verify-gpu: the build failed; see $logs/build.log" >&2
    exit 1
  fi
  grep -E "warning:" "$logs/build.log" || echo "verify-gpu: built with no warnings"
fi
if [[ $steps == *test* ]]; then
  cuda_tests='[Cc]uda|Gpu'
  timeout=(--timeout "${ARC_TEST_TIMEOUT:-300}")
  selected=()
  [ -z "${ARC_TESTS:-}" ] || selected=(-R "$ARC_TESTS")
  status=0
  # The GPU's own tests first: only this machine runs them, and their log comes back even when a time
  # limit cuts the longer CPU pass short.
  (cd build-gpu && ctest "${timeout[@]}" -R "$cuda_tests" --output-on-failure -V) >"$logs/ctest-cuda.log" 2>&1 ||
    status=1
  tail -n 4 "$logs/ctest-cuda.log"
  (cd build-gpu && CUDA_VISIBLE_DEVICES='' ctest "${timeout[@]}" -j "$(nproc)" "${selected[@]}" -E "$cuda_tests" \
    --output-on-failure) >"$logs/ctest-cpu.log" 2>&1 || status=1
  tail -n 4 "$logs/ctest-cpu.log"
  # A test that skipped with the GPU hidden runs again with it visible, whatever its name.
  skipped=$(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/^\1$/p' "$logs/ctest-cpu.log" | paste -sd'|')
  if [ -n "$skipped" ]; then
    (cd build-gpu && ctest "${timeout[@]}" -R "$skipped" --output-on-failure -V) >>"$logs/ctest-cuda.log" 2>&1 ||
      status=1
    tail -n 4 "$logs/ctest-cuda.log"
  fi
  [ $status -eq 0 ] || echo "verify-gpu: tests failed; see $logs/ctest-*.log" >&2
fi
if [[ $steps == *bench* ]]; then
  ARC_BENCH_PYTHON=$python build-gpu/bin/arc_bench_frameworks gpu "${ARC_BENCH_REPEATS:-3}" 2>&1 |
    tee "$logs/bench-gpu.txt"
fi
exit "${status:-0}"
