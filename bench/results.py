"""Keeps bench/RESULTS.md: runs the benchmarks on this machine, keeps the SUMMARY lines they print
(one row of a table each) with the date, commit, command and machine in bench/results/<machine>.json,
and writes RESULTS.md anew from every machine's file: one table per benchmark, one row per machine.

    python3 bench/results.py [--machine NAME] [--build build] [BENCH ...]   run, keep, write
    python3 bench/results.py --render                                       write RESULTS.md only

scripts/bench-results.sh runs it. BENCH names a benchmark (arc_bench_ddp, ...); none: all of them.
time-newcomer (scripts/time-newcomer.sh: the README's two commands on a fresh Debian 12 chroot, as
root, about half an hour) runs only when named.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(ROOT, "bench", "results")
PAGE = os.path.join(ROOT, "bench", "RESULTS.md")

# Each benchmark's arguments for this page, on a CPU machine and on a GPU machine, and what its
# tables show.
BENCHES = {
    "arc_bench_frameworks": (["cpu", "3"], ["gpu", "1"],
                             "One epoch of the canonical workloads on one device, one CPU thread: Arclight "
                             "(`arc train`), a plain PyTorch loop and PyTorch Lightning, samples/s, with "
                             "whether the final weights are the same bits."),
    "arc_bench_ddp": (["3"], ["3"],
                      "Two processes of one thread: Arclight `ddp_spawn` x2 (shared memory) against twice one "
                      "process, against what two separate processes reach at once (the machine's ceiling), "
                      "and against PyTorch DDP x2 under torchrun on the same workload."),
    "arc_bench_allreduce": (["200"], ["200"],
                            "All-reduce of float32 between two local processes, median microseconds: an "
                            "ordinary tensor through shared memory (shm), a `reduce_buffer` tensor as DDP's "
                            "buckets (buffer), and Gloo on loopback."),
    "arc_bench_checkpoint": (["/tmp", "3"], ["/tmp", "3"],
                             "Saving and loading a 105M-parameter model with SGD momentum (839 MB) against "
                             "plain `fwrite` + `fsync` and `fread` of the same bytes (above 1: faster), a "
                             "model of one 419 MB tensor, the 419 MB model's weights as safetensors and as torch.save's .pt "
                             "(save_weights, load_weights), and saves in the background."),
    "arc_bench_trainer": (["5"], ["5"],
                          "The Trainer's own cost: microseconds per step over a hand-written LibTorch loop "
                          "(tiny model, all default callbacks and loggers), the canonical MLP's epoch against "
                          "the hand loop, the simple profiler, and `tune_malloc` on the CNN."),
    "arc_bench_precision": (["1"], ["1"],
                            "One epoch in bf16-mixed against 32-true on the CPU, one thread, with each "
                            "validation accuracy."),
    "arc_bench_sharding": (["3", "memory,speed,prefetch"], ["3", "memory,speed,prefetch"],
                           "Strategy fsdp against DDP: each rank's peak resident memory (VmHWM) for a "
                           "201M-parameter MLP with Adam, and samples/s of the canonical workloads on 2 "
                           "ranks in alternated rounds (weights bit-identical to DDP's); FULL_SHARD over "
                           "Gloo with its gathers started ahead against none."),
    "arc_bench_launchers": (["5"], ["5"],
                            "From a command's start to rank 0's first training step under each launcher (2 "
                            "processes), and how long a failure keeps training away."),
}
# Measurements that run only when named: a script and what its table shows.
NAMED_ONLY = {
    "time-newcomer": ("scripts/time-newcomer.sh",
                      "What a newcomer waits on a fresh Debian 12 machine (a new debootstrap chroot, no packages, "
                      "an empty compiler cache), in seconds: the README's first command (install, build, train), "
                      "then its second (install, build, run the whole suite), then a clean rebuild of the library "
                      "and `arc` without the compiler cache."),
}


def run(command, **kwargs):
    return subprocess.run(command, cwd=ROOT, text=True, **kwargs)


def machine_name():
    """A GPU machine by its GPU, any other by its CPUs."""
    if shutil.which("nvidia-smi"):
        gpus = run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True).stdout
        if gpus.strip():
            return gpus.strip().splitlines()[0]
    return f"{os.cpu_count()}-CPU {platform.machine()}, no GPU"


def machine_description(libtorch):
    """The machine's CPUs and memory, and `libtorch` ("LibTorch 1.13.0", or "" where unknown)."""
    model = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "")
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} CPUs ({model}), {memory:.0f} GiB" + (f", {libtorch}" if libtorch else "")


def slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def commit():
    head = run(["git", "rev-parse", "--short", "HEAD"], capture_output=True).stdout.strip()
    dirty = run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True).stdout.strip()
    return head + ("+changes" if dirty else "")


def measure(bench, args, build):
    """Runs one benchmark, its output shown as it comes; its command, its SUMMARY rows and the
    LibTorch its header names ("" where it names none)."""
    if bench in NAMED_ONLY:
        command, shown = [os.path.join(ROOT, NAMED_ONLY[bench][0])], NAMED_ONLY[bench][0]
    else:
        command, shown = [os.path.join(build, "bin", bench)] + args, " ".join([bench] + args)
    if not os.access(command[0], os.X_OK):
        sys.exit(f"results.py: {command[0]} is missing; build the benchmarks first (scripts/build.sh), "
                 f"or pass --build with the build folder that has them")
    print("$", shown, flush=True)
    process = subprocess.Popen(command, cwd=ROOT, text=True, stdout=subprocess.PIPE)
    rows, libtorch = [], ""
    for line in process.stdout:
        sys.stdout.write(line)
        if line.startswith("SUMMARY "):
            rows.append(json.loads(line[len("SUMMARY "):]))
        elif line.startswith("LibTorch "):  # the benchmarks' header: "LibTorch 1.13.0, intra-op threads 1"
            libtorch = line.split(",")[0]
    if process.wait() != 0:
        sys.exit(f"results.py: {bench} failed (exit status {process.returncode}); nothing of it was kept")
    if not rows:
        sys.exit(f"results.py: {bench} printed no SUMMARY line; nothing of it was kept")
    return shown, rows, libtorch


def load(path):
    with open(path) as file:
        return json.load(file)


# The README's comparison with PyTorch and Lightning: this machine's rows of these tables.
README = os.path.join(ROOT, "README.md")
README_MACHINE = "2-vCPU VM"
README_BEGIN, README_END = "<!-- bench/results.py writes this table -->", "<!-- end of the table -->"


def readme_table(tables):
    """The README's comparison table from README_MACHINE's rows, or None without them."""
    def row(table):
        bench, columns, rows = tables.get(table, (None, [], []))
        found = [dict(zip(["machine", "date", "commit", "command"] + columns, r)) for r in rows]
        found = [r for r in found if r["machine"] == README_MACHINE]
        return found[0] if found else None

    def number(text):
        return f"{float(text):,.0f}" if text not in ("-", "") else ""

    out = ["| workload | Arclight | PyTorch | Lightning 2.2.5 | Arclight against them |", "|---|---|---|---|---|"]
    for model, name in (("mlp", "MLP"), ("cnn", "CNN")):
        one = row(f"arc_bench_frameworks {model} 32-true")
        if one is None:
            return None
        out.append(f"| {name}, 1 process | {number(one['Arclight, samples/s'])} | "
                   f"{number(one['PyTorch loop, samples/s'])} | {number(one['Lightning, samples/s'])} | "
                   f"{one['vs PyTorch']}x PyTorch, {one['vs Lightning']}x Lightning |")
    for model, name in (("mlp", "MLP, 2 processes (`ddp_spawn`; PyTorch DDP under torchrun)"),
                        ("cnn", "CNN, 2 processes")):
        ddp = row(f"arc_bench_ddp {model}")
        if ddp is None:
            return None
        out.append(f"| {name} | {number(ddp['ddp_spawn x2, samples/s'])} | "
                   f"{number(ddp['PyTorch DDP x2, samples/s'])} | | {ddp['vs PyTorch DDP']}x PyTorch DDP |")
    return out


def render_readme(tables):
    lines = readme_table(tables)
    with open(README) as file:
        text = file.read()
    if lines is None or README_BEGIN not in text or README_END not in text:
        return
    begin, end = text.index(README_BEGIN) + len(README_BEGIN), text.index(README_END)
    with open(README, "w") as file:
        file.write(text[:begin] + "\n" + "\n".join(lines) + "\n" + text[end:])
    print(f"wrote the comparison in {os.path.relpath(README, ROOT)}")


def render():
    machines = [load(os.path.join(RESULTS_DIR, name)) for name in sorted(os.listdir(RESULTS_DIR))
                if name.endswith(".json")]
    tables = {}  # table -> (bench, columns, rows)
    for machine in machines:
        for bench, kept in machine["benches"].items():
            for row in kept["rows"]:
                columns = [name for name, _ in row["columns"]]
                entry = tables.setdefault(row["table"], (bench, columns, []))
                values = dict(row["columns"])
                entry[2].append([machine["name"], kept["date"], f"`{kept['commit']}`", f"`{kept['command']}`"] +
                                [values.get(column, "-") for column in entry[1]])
    out = ["# Benchmark results", "",
           "The current figures of each benchmark, one row per machine kind, each with the date, commit and",
           "command that gave it. `scripts/bench-results.sh` runs the benchmarks on a machine and writes this",
           "page from their own output; [README.md](README.md) says what each benchmark does and how to read it.",
           "Ratios come from runs of the same invocation, alternated where the benchmark says so; on",
           "virtual machines, runs of one command often spread by 10-30%, and a ratio within that says little.",
           "", "## Machines", ""]
    for machine in machines:
        out.append(f"- **{machine['name']}**: {machine['description']}")
    described = set()
    for table, (bench, columns, rows) in tables.items():
        out += ["", f"## {table}", ""]
        if bench not in described:
            out += [BENCHES[bench][2] if bench in BENCHES else NAMED_ONLY[bench][1], ""]
            described.add(bench)
        out.append("| machine | date | commit | command | " + " | ".join(columns) + " |")
        out.append("|---" * (len(columns) + 4) + "|")
        out += ["| " + " | ".join(row) + " |" for row in rows]
    with open(PAGE, "w") as page:
        page.write("\n".join(out) + "\n")
    print(f"wrote {os.path.relpath(PAGE, ROOT)}")
    render_readme(tables)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("benches", nargs="*", help="benchmarks to run (default: all)")
    parser.add_argument("--machine", help="the row's machine kind (default: the GPU's name, else the CPU count)")
    parser.add_argument("--build", default="build", help="the build folder with bin/arc_bench_* (default: build)")
    parser.add_argument("--render", action="store_true", help="only write RESULTS.md from bench/results/")
    args = parser.parse_args()
    if args.render:
        return render()
    unknown = [bench for bench in args.benches if bench not in BENCHES and bench not in NAMED_ONLY]
    if unknown:
        sys.exit(f"results.py: unknown benchmark {', '.join(unknown)}; known: {', '.join([*BENCHES, *NAMED_ONLY])}")
    name = args.machine or machine_name()
    gpu = shutil.which("nvidia-smi") is not None and "no GPU" not in name
    path = os.path.join(RESULTS_DIR, slug(name) + ".json")
    machine = load(path) if os.path.exists(path) else {"name": name, "benches": {}}
    for bench in args.benches or list(BENCHES):
        arguments = BENCHES[bench][1 if gpu else 0] if bench in BENCHES else []
        command, rows, libtorch = measure(bench, arguments, os.path.abspath(args.build))
        machine["benches"][bench] = {"date": datetime.date.today().isoformat(), "commit": commit(),
                                     "command": command, "rows": rows}
        if libtorch or "description" not in machine:
            machine["description"] = machine_description(libtorch)
        os.makedirs(RESULTS_DIR, exist_ok=True)
        with open(path, "w") as file:
            json.dump(machine, file, indent=1)
            file.write("\n")
    render()


if __name__ == "__main__":
    main()
