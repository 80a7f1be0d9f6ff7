#!/usr/bin/env bash
# Installs, builds and trains the example MLP on the canonical workload with ddp_spawn on two
# processes of this machine; prints its RESULT line. Extra arguments go to `arc train`.
# It installs and builds only what training needs; scripts/test.sh adds the tests and benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
installed=$SECONDS
scripts/build.sh -DARC_BUILD_TESTS=OFF -DARC_BUILD_BENCH=OFF
built=$SECONDS
build/bin/arc train --config apps/configs/mlp_ddp_spawn.json "$@"
echo "train-example.sh: packages ${installed} s, build $((built - installed)) s, training $((SECONDS - built)) s" >&2
