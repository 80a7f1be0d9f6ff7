# shellcheck shell=bash
# Shared by the scripts that try Arclight in a fresh Debian chroot (check-libtorch2.sh,
# time-newcomer.sh); sourced, not run. Needs root.

# Makes a minimal Debian <suite> in <folder> with debootstrap, unless one is there already.
arc_chroot_bootstrap() {
  local suite=$1 root=$2
  if [ "$(id -u)" -ne 0 ]; then
    echo "$(basename "$0"): debootstrap, mount and chroot need root; run it with sudo" >&2
    exit 2
  fi
  command -v debootstrap >/dev/null || apt-get -o DPkg::Lock::Timeout=600 install -y -q debootstrap
  [ -x "$root/usr/bin/apt-get" ] || debootstrap --variant=minbase "$suite" "$root" http://deb.debian.org/debian
}

# Mounts what the tests need in <folder> (/proc for re-execution, /dev/shm for the shared-memory
# collectives, cgroups for slurmd), unmounted when the calling script exits; copies the working tree
# (tracked and untracked files that git does not ignore) to <folder>/src.
arc_chroot_enter() {
  ARC_CHROOT_ROOT=$1
  trap arc_chroot_unmount EXIT
  arc_chroot_unmount
  mount -t proc proc "$ARC_CHROOT_ROOT/proc"
  mount --rbind /dev "$ARC_CHROOT_ROOT/dev"
  mount -t sysfs sys "$ARC_CHROOT_ROOT/sys"
  mount --rbind /sys/fs/cgroup "$ARC_CHROOT_ROOT/sys/fs/cgroup"
  # Slaves, so that unmounting them never propagates to the host's own mounts.
  mount --make-rslave "$ARC_CHROOT_ROOT/dev"
  mount --make-rslave "$ARC_CHROOT_ROOT/sys"
  cp /etc/resolv.conf "$ARC_CHROOT_ROOT/etc/resolv.conf"
  # An installed Debian names localhost and its host in /etc/hosts (127.0.1.1); debootstrap may write
  # neither. The Slurm tests' ranks meet at localhost, and Slurm 24.11's slurmctld resolves the host
  # name to reach srun when a job is cancelled (scancel hung).
  grep -qw localhost "$ARC_CHROOT_ROOT/etc/hosts" || echo "127.0.0.1 localhost" >>"$ARC_CHROOT_ROOT/etc/hosts"
  grep -qw "$(hostname)" "$ARC_CHROOT_ROOT/etc/hosts" || echo "127.0.1.1 $(hostname)" >>"$ARC_CHROOT_ROOT/etc/hosts"
  rm -rf "$ARC_CHROOT_ROOT/src"
  mkdir -p "$ARC_CHROOT_ROOT/src"
  git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -C "$ARC_CHROOT_ROOT/src" -xf -
}

arc_chroot_unmount() {
  umount -R "$ARC_CHROOT_ROOT/sys" "$ARC_CHROOT_ROOT/dev" "$ARC_CHROOT_ROOT/proc" "$ARC_CHROOT_ROOT/opt/cuda" 2>/dev/null ||
    true
}
