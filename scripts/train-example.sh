#!/usr/bin/env bash
# Installs, builds and trains the example MLP on the canonical workload; prints its RESULT line.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/bin/arc train "$@"
