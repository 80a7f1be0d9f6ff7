#!/usr/bin/env bash
# Runs the benchmarks on this machine and writes bench/RESULTS.md anew from their output (one table
# per benchmark, one row per machine kind; bench/results/<machine>.json keeps each machine's rows).
#   scripts/bench-results.sh [--machine NAME] [BENCH ...]   run all (or the named) benchmarks here
#   scripts/bench-results.sh --render                       rewrite RESULTS.md from bench/results/
#   scripts/bench-results.sh time-newcomer                  the README's two commands on a fresh chroot (root)
# Build first (scripts/build.sh). The Lightning rows need a python3 that imports lightning
# (PYTHONPATH or ARC_BENCH_PYTHON); without one they read "-".
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/results.py "$@"
