#!/usr/bin/env bash
# Installs every Debian 12 package Arclight needs to build, test and benchmark. The launcher
# tests start real ones: SLURM (slurm-wlm), mpirun (openmpi-bin) and torchrun (python3-torch,
# which also runs the PyTorch side of the benchmarks).
# OpenBLAS's OpenMP build matters: it follows torch::set_num_threads (the pthread build does
# not), and Debian's default reference BLAS makes the MLP about 15x slower.
set -euo pipefail

packages=(
  build-essential cmake ccache
  libtorch-dev libgloo-dev libopenblas0-openmp
  nlohmann-json3-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libprotobuf-dev protobuf-compiler
  slurm-wlm openmpi-bin python3-torch
)

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
