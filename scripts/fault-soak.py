#!/usr/bin/env python3
"""Fault soak: repeated fits under ddp_spawn and torchrun with faults injected, each resumed until
it finishes, for a given time. Faults: SIGKILL, SIGTERM or SIGINT of a rank or of the launcher, and
the disk (a tmpfs holding the run's folder) filling up during a run and freed after it. Prints the
counts: runs, faults, resumes, final weights equal to the uninterrupted run's, trials that never
finished, checkpoints lost, processes and shared-memory files left behind, hangs past the timeout.
The last five must be 0.

    scripts/fault-soak.py [--minutes 60] [--build build] [--seed 1]

Root only (it mounts the tmpfs); Debian's torchrun. Not part of the suite (CONTRIBUTING.md, "Fault
soak").
"""
import argparse
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A short exact run: 4 checkpoints an epoch, each kept, and last.ckpt for the resume.
CONFIG = """
seed_everything: 7
trainer:
  max_epochs: 2
  limit_train_batches: 40
  limit_val_batches: 4
  devices: 2
  enable_progress_bar: false
  logger: false
  deterministic: true
  callbacks:
    - class_path: ModelCheckpoint
      init_args: {every_n_train_steps: 10, save_top_k: -1, save_last: true}
module:
  name: mlp_classifier
data:
  batch_size: 32
"""
SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}


def checkpoint_is_whole(path):
    """The checkpoint format's header, trailer and index (fabric/checkpoint.h), without its checksums."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < 48 or data[:8] != b"ARCCKPT\0" or data[-8:] != b"ARCCKEND":
            return False
        offset, size = struct.unpack("<QQ", data[-32:-16])
        if offset + size + 32 != len(data):
            return False
        index = json.loads(data[offset:offset + size])
        return "entries" in index and "meta" in index
    except (OSError, ValueError):
        return False


def whole_checkpoints(folder):
    names = set()
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            if name.endswith(".ckpt") and checkpoint_is_whole(path):
                names.add(os.path.relpath(path, folder))
    return names


def descendants(pid):
    """Every live process below `pid`."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
        except (OSError, IndexError, ValueError):
            pass
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def in_session(session):
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == session:
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def shm_files():
    return set(os.listdir("/dev/shm"))


class Soak:
    def __init__(self, args):
        self.args = args
        self.random = random.Random(args.seed)
        self.work = tempfile.mkdtemp(prefix="arc_soak_")
        self.disk = os.path.join(self.work, "disk")
        os.makedirs(self.disk)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.disk_mb}m", "tmpfs", self.disk], check=True)
        self.config = os.path.join(self.work, "soak.yaml")
        with open(self.config, "w") as f:
            f.write(CONFIG)
        self.counts = {k: 0 for k in ("runs", "faults", "resumes", "finished", "equal_to_uninterrupted",
                                      "unfinished", "checkpoints_lost", "processes_left", "shm_files_left",
                                      "hangs")}
        self.faults_by_kind = {}

    def close(self):
        subprocess.run(["umount", self.disk], check=False)
        shutil.rmtree(self.work, ignore_errors=True)

    def command(self, launcher, root, resume):
        arc = os.path.join(self.args.build, "bin", "arc")
        args = ["fit", "--config", self.config, "--set", f"trainer.default_root_dir={root}"]
        if resume:
            args += ["--resume", "last"]
        if launcher == "ddp_spawn":
            return [arc] + args + ["--set", "trainer.strategy=ddp_spawn"]
        port = str(self.random.randrange(20000, 60000))
        return ["torchrun", "-r", "9:1", "-t", "9:1", "--nproc_per_node", "2", "--master_port", port, "--no_python",
                arc] + args + ["--set", "trainer.strategy=ddp"]

    def run_once(self, launcher, root, resume, fault_after=None, fault=None):
        """One run; the fault, if any, after `fault_after` s. Returns (exit code, RESULT or None, output)."""
        before_shm = shm_files()
        before = whole_checkpoints(root) if os.path.isdir(root) else set()
        filler = os.path.join(self.disk, "filler")
        log_path = os.path.join(self.work, "run.log")
        with open(log_path, "w") as log:
            process = subprocess.Popen(self.command(launcher, root, resume), cwd=self.work, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self.watch(process, launcher, fault_after, fault, filler)
        finally:
            # Interrupted (Ctrl-C) or failed: nothing of the run stays.
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if os.path.exists(filler):
            os.remove(filler)
        # A rank notices its launcher's end within a poll (exit_with_launcher, PR_SET_PDEATHSIG); one
        # still there after the grace period is left behind.
        grace_end = time.monotonic() + self.args.grace
        left = in_session(process.pid)
        while left and time.monotonic() < grace_end:
            time.sleep(0.1)
            left = in_session(process.pid)
        if left:
            self.counts["processes_left"] += len(left)
            print(f"soak: {len(left)} processes left by {launcher} ({fault}): {left}", file=sys.stderr)
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        new_shm = shm_files() - before_shm
        if new_shm:
            self.counts["shm_files_left"] += len(new_shm)
            print(f"soak: shared-memory files left: {sorted(new_shm)}", file=sys.stderr)
        lost = before - whole_checkpoints(root)
        if lost:
            self.counts["checkpoints_lost"] += len(lost)
            print(f"soak: checkpoints lost ({launcher}, {fault}): {sorted(lost)}", file=sys.stderr)
        with open(log_path, errors="replace") as log:
            text = log.read()
        result = None
        for line in text.splitlines():
            if line.startswith("RESULT "):
                result = json.loads(line[7:])
        return process.returncode, result, text

    def watch(self, process, launcher, fault_after, fault, filler):
        """Waits for the run, injecting the fault on time; a run past the timeout is a hang, ended."""
        self.counts["runs"] += 1
        started = time.monotonic()
        injected = False
        while process.poll() is None:
            elapsed = time.monotonic() - started
            if fault and not injected and elapsed > fault_after:
                injected = self.inject(process, fault, filler)
            if elapsed > self.args.timeout:
                self.counts["hangs"] += 1
                print(f"soak: hang past {self.args.timeout} s ({launcher}, {fault}); ended it", file=sys.stderr)
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return
            time.sleep(0.05)

    def inject(self, process, fault, filler):
        if fault == "disk_full":
            # Filled to the last page: the write that no longer fits is expected to fail.
            try:
                with open(filler, "wb") as f:
                    f.write(b"\0" * shutil.disk_usage(self.disk).free)
            except OSError:
                pass
        else:
            target, name = fault.split(":")
            pids = [process.pid]
            if target == "rank":
                ranks = [p for p in descendants(process.pid) if self.is_rank(p)]
                if not ranks:
                    return False
                pids = [self.random.choice(ranks)]
            for pid in pids:
                try:
                    os.kill(pid, SIGNALS[name])
                except OSError:
                    return False
        self.counts["faults"] += 1
        self.faults_by_kind[fault] = self.faults_by_kind.get(fault, 0) + 1
        return True

    @staticmethod
    def is_rank(pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return b"arc-engine" in f.read()
        except OSError:
            return False

    def reference(self):
        root = os.path.join(self.disk, "reference")
        started = time.monotonic()
        code, result, text = self.run_once("ddp_spawn", root, False)
        if code != 0 or result is None:
            sys.exit(f"soak: the uninterrupted run failed ({code}):\n{text}")
        shutil.rmtree(root, ignore_errors=True)
        return result["final_param_sha256"], time.monotonic() - started

    def trial(self, number, digest, seconds):
        launcher = self.random.choice(["ddp_spawn", "torchrun"])
        root = os.path.join(self.disk, f"trial_{number}")
        kinds = [f"{t}:{s}" for t in ("rank", "launcher") for s in SIGNALS] + ["disk_full"]
        resume = False
        for attempt in range(self.args.attempts):
            fault = self.random.choice(kinds) if attempt < self.args.faults_per_trial else None
            code, result, text = self.run_once(launcher, root, resume, self.random.uniform(0.5, seconds * 1.2), fault)
            if result is not None and code == 0:
                self.counts["finished"] += 1
                if result.get("final_param_sha256") == digest:
                    self.counts["equal_to_uninterrupted"] += 1
                else:
                    print(f"soak: trial {number} ({launcher}) ended with other weights", file=sys.stderr)
                break
            if fault is None:
                # A run without a fault that does not finish: what it said is the clue.
                print(f"soak: trial {number} ({launcher}) failed without a fault ({code}):\n{text[-3000:]}",
                      file=sys.stderr)
            if attempt + 1 < self.args.attempts:
                resume = True
                self.counts["resumes"] += 1
        else:
            self.counts["unfinished"] += 1
            print(f"soak: trial {number} ({launcher}) did not finish in {self.args.attempts} runs", file=sys.stderr)
        shutil.rmtree(root, ignore_errors=True)

    def run(self):
        digest, seconds = self.reference()
        end = time.monotonic() + self.args.minutes * 60
        number = 0
        while time.monotonic() < end:
            self.trial(number, digest, seconds)
            number += 1
            print("soak: " + json.dumps(self.counts), file=sys.stderr)
        print(json.dumps({"trials": number, **self.counts, "faults_by_kind": self.faults_by_kind}, indent=1))
        bad = sum(self.counts[k] for k in ("unfinished", "checkpoints_lost", "processes_left", "shm_files_left", "hangs"))
        return 0 if bad == 0 and self.counts["equal_to_uninterrupted"] == self.counts["finished"] else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--build", default=os.path.join(SOURCE, "build"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=240, help="seconds after which a run counts as hung")
    parser.add_argument("--grace", type=float, default=10,
                        help="seconds a run's processes may take to end after its launcher did")
    parser.add_argument("--disk_mb", type=int, default=256, help="size of the tmpfs the runs write to")
    parser.add_argument("--attempts", type=int, default=8, help="runs per trial at most (the first and resumes)")
    parser.add_argument("--faults_per_trial", type=int, default=2)
    args = parser.parse_args()
    soak = Soak(args)
    try:
        return soak.run()
    finally:
        soak.close()


if __name__ == "__main__":
    sys.exit(main())
