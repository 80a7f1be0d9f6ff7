#!/usr/bin/env bash
# Builds Arclight against LibTorch 2.x and runs the test suite there: Debian 13 (trixie), whose
# libtorch-dev is 2.6, in a chroot made with debootstrap from Debian's archive. Needs root.
#   scripts/check-libtorch2.sh [chroot folder, default /tmp/arc-trixie]
# The folder is kept, so a second run skips debootstrap and compiles through the chroot's ccache.
set -euo pipefail
cd "$(dirname "$0")/.."
root=${1:-/tmp/arc-trixie}
. scripts/chroot-common.sh
arc_chroot_bootstrap trixie "$root"
arc_chroot_enter "$root"

# The host's CUDA toolkit, when it has one, is lent read-only, so that cuda.SourcesCompileWithCudaAndNccl
# compiles the CUDA and NCCL code against LibTorch 2.x's headers too.
cuda_home=
if [ -f /usr/local/cuda/include/cuda_runtime_api.h ]; then
  mkdir -p "$root/opt/cuda"
  mount --bind -o ro "$(realpath /usr/local/cuda)" "$root/opt/cuda"
  cuda_home=/opt/cuda
fi

# Debian 13's torchrun cannot start as packaged (`torchrun --nproc_per_node 1 --no_python true`
# fails): its elastic rendezvous creates TCPStore with the default libuv backend, which that build
# of PyTorch 2.6 lacks, and USE_LIBUV=0 does not reach that call. A sitecustomize on PYTHONPATH
# makes TCPStore default to its classic backend, changing nothing else, so that every torchrun test
# runs against PyTorch 2.x's torchrun (which, unlike Debian 12's, starts each worker in a session
# of its own).
mkdir -p "$root/opt/torchrun-classic-store"
cat >"$root/opt/torchrun-classic-store/sitecustomize.py" <<'PYTHON'
import torch.distributed as dist

_TCPStore = dist.TCPStore


class TCPStore(_TCPStore):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("use_libuv", False)
        super().__init__(*args, **kwargs)


dist.TCPStore = TCPStore
PYTHON
chroot "$root" env CUDA_HOME="$cuda_home" bash -c "cd /src && scripts/install-deps.sh --tests && scripts/build.sh &&
  PYTHONPATH=/opt/torchrun-classic-store ctest --test-dir build --output-on-failure -j \"\$(nproc)\""
