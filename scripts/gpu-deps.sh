#!/usr/bin/env bash
# Gathers, here (Debian 12, with its package archive), what a GPU machine without our Debian
# packages needs to build and test Arclight: the files of those packages unpacked under one folder,
# which scripts/verify-gpu.sh uses as a CMake prefix there. LibTorch, CUDA and NCCL are not among
# them: they come from the GPU machine's PyTorch. Gloo's headers go to a folder of their own, used
# only where that PyTorch ships none (its own Gloo must not be shadowed).
#   scripts/gpu-deps.sh [folder=.gpu-deps]
set -euo pipefail
cd "$(dirname "$0")/.."
folder=${1:-.gpu-deps}
packages=(
  nlohmann-json3-dev libyaml-cpp-dev libyaml-cpp0.7 libcli11-dev libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libgtest-dev libgmock-dev
  libprotobuf-dev libprotobuf32 protobuf-compiler libprotoc32
)
rm -rf "$folder"
mkdir -p "$folder/debs"
(cd "$folder/debs" && apt-get download "${packages[@]}" libgloo-dev)
for deb in "$folder"/debs/*.deb; do
  case "$(basename "$deb")" in
    libgloo-dev_*) dpkg-deb -x "$deb" "$folder/gloo" ;;
    *) dpkg-deb -x "$deb" "$folder/root" ;;
  esac
done
# Documentation, googletest's sources and static protobuf are not needed to build and test.
rm -rf "$folder/debs" "$folder"/root/usr/share/doc "$folder"/root/usr/share/man "$folder"/root/usr/src \
  "$folder"/root/usr/lib/x86_64-linux-gnu/libprotobuf*.a
echo "gpu-deps: $(du -sh "$folder" | cut -f1) in $folder; carry it to the GPU machine and run scripts/verify-gpu.sh $folder"
