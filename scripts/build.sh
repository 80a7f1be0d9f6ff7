#!/usr/bin/env bash
# Configures and builds Arclight (Release) into ./build: the library, the arc tool and the examples,
# and the tests and benchmarks unless -DARC_BUILD_TESTS=OFF -DARC_BUILD_BENCH=OFF say otherwise (the
# tests need `scripts/install-deps.sh --tests`). Extra arguments go to CMake.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DARC_BUILD_TESTS=ON -DARC_BUILD_BENCH=ON "$@"
cmake --build build -j "$(nproc)"
