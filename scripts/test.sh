#!/usr/bin/env bash
# Installs, builds and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --tests
installed=$SECONDS
scripts/build.sh
built=$SECONDS
ctest --test-dir build --output-on-failure -j "$(nproc)"
echo "test.sh: packages ${installed} s, build $((built - installed)) s, tests $((SECONDS - built)) s" >&2
