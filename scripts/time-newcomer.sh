#!/usr/bin/env bash
# Times what a newcomer waits on a fresh Debian 12 machine. In a new bookworm chroot made with
# debootstrap (no Arclight package installed, empty compiler cache) it runs the README's first
# command, then its second, then a clean rebuild of the library and `arc` without the compiler
# cache, and prints the three times, then them as one SUMMARY line for bench/RESULTS.md
# (scripts/bench-results.sh time-newcomer runs it). Needs root.
#   scripts/time-newcomer.sh [folder for debootstrap's base system, default /tmp/arc-bookworm]
# The base system is kept for the next run; each run works in a fresh copy of it, <folder>-run.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-/tmp/arc-bookworm}
. scripts/chroot-common.sh
arc_chroot_bootstrap bookworm "$base"
root=$base-run
ARC_CHROOT_ROOT=$root arc_chroot_unmount
# --one-file-system: never into a mount that an interrupted run left behind.
rm -rf --one-file-system "$root"
cp -a "$base" "$root"
arc_chroot_enter "$root"
# Each step's output is in <folder>-run/tmp/{first,second,rebuild}.log.
# shellcheck disable=SC2016 # expanded by the chroot's shell
chroot "$root" bash -c 'set -euo pipefail; cd /src
  start=$SECONDS; scripts/train-example.sh >/tmp/first.log; first=$((SECONDS - start))
  start=$SECONDS; scripts/test.sh >/tmp/second.log; second=$((SECONDS - start))
  rm -rf build
  start=$SECONDS; CCACHE_DISABLE=1 scripts/build.sh -DARC_BUILD_TESTS=OFF -DARC_BUILD_BENCH=OFF >/tmp/rebuild.log
  rebuild=$((SECONDS - start))
  grep "^RESULT" /tmp/first.log
  echo "first command (scripts/train-example.sh): ${first} s"
  echo "second command (scripts/test.sh): ${second} s"
  echo "clean rebuild of the library and arc: ${rebuild} s"
  tests=$(grep -oE "[0-9]+ tests failed out of [0-9]+" /tmp/second.log | tail -n 1)
  printf "SUMMARY {\"table\": \"scripts/time-newcomer.sh\", \"columns\": [[\"first command, s\", \"%s\"], [\"second command, s\", \"%s\"], [\"clean rebuild, s\", \"%s\"], [\"tests\", \"%s\"]]}\n" \
    "$first" "$second" "$rebuild" "$tests"'
