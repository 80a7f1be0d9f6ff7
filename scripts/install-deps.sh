#!/usr/bin/env bash
# Installs the Debian 12 packages Arclight needs to build and train; with --tests, also those the
# test suite needs: GoogleTest and the real launchers its tests start (SLURM's slurm-wlm, mpirun's
# openmpi-bin, and python3-torch for torchrun and the PyTorch side of the benchmarks), scikit-learn,
# which the metrics are checked against, and Doxygen, whose API reference the suite checks.
# OpenBLAS's OpenMP build matters: it follows torch::set_num_threads (the pthread build does
# not), and Debian's default reference BLAS makes the MLP about 15x slower.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache
  libtorch-dev libgloo-dev libopenblas0-openmp
  nlohmann-json3-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev
  libprotobuf-dev protobuf-compiler
)
case "${1:-}" in
  "") ;;
  --tests) packages+=(libgtest-dev libgmock-dev slurm-wlm openmpi-bin python3-torch python3-sklearn doxygen) ;;
  *)
    echo "install-deps.sh: unknown argument '$1'; use no argument (build and train) or --tests" >&2
    exit 2
    ;;
esac

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -q "${missing[@]}"
fi
