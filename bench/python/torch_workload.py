"""The canonical workload (shared/WORKLOAD.md) in plain PyTorch: one process, or DDP under
torchrun (gloo). The baseline that bench/ddp_bench runs beside Arclight.

    python3 torch_workload.py --model mlp
    python3 torch_workload.py --model cnn --device cuda --precision bf16-mixed
    torchrun --nproc_per_node 2 -r 9:1 -t 9:1 torch_workload.py --model cnn

Prints one line: RESULT {json} with WORKLOAD.md section 6's fields.
"""
import argparse
import hashlib
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(seed, k):
    """k-th outputs of stream `seed`, vectorised; uint64 arithmetic wraps as the spec says."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + (k.astype(np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def make_data():
    n, d = 70000, 784
    y = (splitmix64(1, np.arange(n)) % np.uint64(10)).astype(np.int64)
    proto = np.where((splitmix64(2, np.arange(490)) >> np.uint64(63)) == 1, 1, -1).reshape(10, 49)
    j = np.arange(d)
    q = (j // 28 // 4) * 7 + (j % 28) // 4
    x = np.empty((n, d), dtype=np.float32)
    for start in range(0, n, 5000):
        rows = np.arange(start, min(n, start + 5000))
        h = splitmix64(3, rows[:, None] * d + j[None, :])
        noise = (((h >> np.uint64(32)) & np.uint64(255)) + ((h >> np.uint64(40)) & np.uint64(255))
                 + ((h >> np.uint64(48)) & np.uint64(255)) + (h >> np.uint64(56))).astype(np.int64) - 510
        x[rows] = ((16 * proto[y[rows]][:, q] + noise).astype(np.float32)) / np.float32(256.0)
    return torch.from_numpy(x), torch.from_numpy(y)


def make_model(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(nn.Unflatten(1, (1, 28, 28)), nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(1568, 10))


def init_parameters(model):
    fan_in = 1
    with torch.no_grad():
        for p_index, p in enumerate(model.parameters()):
            if p.dim() >= 2:
                fan_in = p.numel() // p.shape[0]
            u = (splitmix64(2000 + p_index, np.arange(p.numel())) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
            values = (1.0 / np.sqrt(fan_in)) * (2.0 * u - 1.0)
            p.copy_(torch.from_numpy(values.astype(np.float32)).reshape(p.shape))


def parameter_sha256(model):
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().float().cpu().contiguous().numpy().astype("<f4").tobytes())
    return digest.hexdigest()


def validate(model, x, y, precision, rank=0, world=1):
    """Summed loss, correct count and count over this rank's share of the validation samples."""
    device = next(model.parameters()).device
    model.eval()
    with torch.no_grad():
        val = torch.arange(60000 + rank, 70000, world)
        totals = torch.zeros(3, dtype=torch.float64)
        for b in range(0, len(val), 1000):
            index = val[b:b + 1000]
            labels = y[index].to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
                logits = model(x.index_select(0, index).to(device))
            totals[0] += F.cross_entropy(logits.float(), labels, reduction="sum").item()
            totals[1] += (logits.argmax(1) == labels).sum().item()
            totals[2] += len(index)
    return totals


def epoch_order():
    """The training samples in WORKLOAD.md's epoch order."""
    return torch.from_numpy(np.argsort(splitmix64(1000, np.arange(60000)), kind="stable"))


def add_workload_arguments(parser):
    """The options both implementations take: model, step limit and precision."""
    parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    parser.add_argument("--steps", type=int, default=0, help="stop after this many steps (0 = one epoch)")
    parser.add_argument("--precision", choices=["32-true", "bf16-mixed"], default="32-true",
                        help="bf16-mixed: forward and loss under autocast to bfloat16, as Lightning's")
    parser.add_argument("--deterministic", action="store_true",
                        help="deterministic algorithms only (cuDNN and cuBLAS too), as Lightning's deterministic=True")


def print_result(model, steps, world, partial, train_time, first_step, loss_last100, step_ends, totals):
    """Prints WORKLOAD.md section 6's RESULT line from figures already reduced over the ranks."""
    intervals = np.diff(np.array(step_ends)) * 1000
    result = {"train_time_s": train_time, "train_sps": (steps * 64 * world if partial else 60000) / train_time,
              "median_step_ms": float(np.median(intervals)), "mean_step_ms": float(np.mean(intervals)),
              "t_first_step_s": first_step, "train_loss_last100": loss_last100,
              "val_loss": (totals[0] / totals[2]).item(), "val_acc": (totals[1] / totals[2]).item(),
              "final_param_sha256": parameter_sha256(model), "world_size": world,
              "threads": torch.get_num_threads(), "steps": steps}
    print("RESULT " + json.dumps(result), flush=True)


def t0():
    if "BENCH_T0" in os.environ:
        return float(os.environ["BENCH_T0"])
    with open("/proc/self/stat") as f:
        start_ticks = float(f.read().rsplit(")", 1)[1].split()[19])
    started_after_boot = start_ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - started_after_boot)


def main():
    parser = argparse.ArgumentParser()
    add_workload_arguments(parser)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--init-weights", help="start from this state_dict (torch.save's file), not from section 3")
    parser.add_argument("--save", help="torch.save the trained model's state_dict here")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "1")))
    distributed = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)

    x, y = make_data()
    model = make_model(args.model)
    if args.init_weights:
        model.load_state_dict(torch.load(args.init_weights, weights_only=True))
    else:
        init_parameters(model)
    model.to(device)
    net = nn.parallel.DistributedDataParallel(model) if distributed else model
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    shard = epoch_order()[rank::world]
    steps = (len(shard) + 63) // 64
    if args.steps:
        steps = min(steps, args.steps)

    losses, step_ends, first_step = [], [], None
    start = time.perf_counter()
    for step in range(steps):
        index = shard[step * 64:(step + 1) * 64]
        inputs, labels = x.index_select(0, index).to(device), y.index_select(0, index).to(device)
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16-mixed"):
            loss = F.cross_entropy(net(inputs), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())  # also waits for a GPU to finish the step
        step_ends.append(time.perf_counter())
        if first_step is None:
            first_step = time.time() - t0()
    train_time = step_ends[-1] - start

    totals = validate(model, x, y, args.precision, rank, world)
    figures = torch.tensor([train_time, first_step], dtype=torch.float64)
    last100 = torch.tensor([float(np.mean(losses[-100:]))], dtype=torch.float64)
    if distributed:
        dist.all_reduce(totals)
        dist.all_reduce(figures, op=dist.ReduceOp.MAX)
        dist.all_reduce(last100)
        last100 /= world
    if rank == 0 and args.save:
        torch.save(model.state_dict(), args.save)
    if rank == 0:
        print_result(model, steps, world, bool(args.steps), figures[0].item(), figures[1].item(), last100.item(),
                     step_ends, totals)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
