// Distributed throughput on the canonical workloads: Arclight in one process and with
// ddp_spawn x2, against PyTorch DDP (torchrun, gloo) on the same workload in the same invocation.
// Every run is a fresh command; the table compares their RESULT lines (WORKLOAD.md section 6).
//   arc_bench_ddp [repeats=3] [models=mlp,cnn]
// "spread" is how far apart a row's runs were ((fastest - slowest) / median): a ratio between two rows
// means little where it is as wide as their spreads.
// The PyTorch side runs under $ARC_BENCH_PYTHON, else the first of /usr/bin/python3 and python3
// that imports torch (torchrun as that Python's torch.distributed.run); without one, its rows are
// left out and the ratios are against Arclight's Gloo row.
#include "bench_util.h"

#include <nlohmann/json.hpp>

#include <iomanip>

#include <sched.h>

namespace {

// The CPUs this process may run on.
std::vector<int> usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

}  // namespace

int main(int argc, char** argv) try {
  using namespace arc::bench;
  const int repeats = static_cast<int>(whole_arg(argc, argv, 1, "repeats", 3));
  const auto models = names_arg(argc, argv, 2, "model", {"mlp", "cnn"}, "mlp,cnn");
  torch::set_num_threads(1);
  print_header("DDP on the canonical workload: 1 thread per process, " + std::to_string(repeats) +
               " runs each, median");
  const std::string arc = arc_train();
  const std::string script = std::string(ARC_SOURCE_DIR) + "/bench/python/torch_workload.py";
  const std::string python_command = arc::testing::python_with_torch();
  const bool python = !python_command.empty();
  if (!python) std::cout << "(no python3 that imports torch: PyTorch rows skipped; set ARC_BENCH_PYTHON)\n";
  // Where the two ranks fill the machine, each has a CPU of its own, and ranks kept in step by their
  // all-reduces go at the slower CPU's pace; on a virtual machine one vCPU may run slower than the
  // other for minutes (its host core is shared). A one-process run pinned to each CPU measures both.
  const std::vector<int> cpus = usable_cpus();
  const bool per_cpu =
      cpus.size() == 2 && std::system(("taskset -c " + std::to_string(cpus[0]) + " true >/dev/null 2>&1").c_str()) == 0;
  if (!per_cpu)
    std::cout << "(rows pinned to each CPU skipped: they need taskset and a machine of 2 CPUs, which the 2 ranks "
              << "fill; this one has " << cpus.size() << ")\n";

  for (const std::string model : {"mlp", "cnn"}) {
    if (!has(models, model)) continue;
    const std::string module = model == "mlp" ? "mlp_classifier" : "cnn_classifier";
    std::vector<Row> rows = {{"Arclight, 1 process", {}},
                             {"Arclight, 2 separate processes at once", {}},
                             {"Arclight ddp_spawn x2, shared memory", {}},
                             {"Arclight ddp_spawn x2, Gloo", {}},
                             {"PyTorch, 1 process", {}},
                             {"PyTorch DDP x2 (torchrun, gloo)", {}},
                             {"ddp_spawn x2 shm, gradients copied", {}},
                             {"Arclight, 1 process, batch 128", {}},
                             {"2 separate at once, slower one's pace", {}},
                             {"Arclight, 1 process, accumulate 2", {}}};
    const size_t first_pinned = rows.size();
    if (per_cpu)
      for (const int cpu : cpus) rows.push_back({"Arclight, 1 process on CPU " + std::to_string(cpu), {}});
    // ddp_spawn x2 with these DDP settings (the strategy's init_args).
    const auto spawn = [&](const std::string& init_args) {
      return arc + " --set module.name=" + module + " --set trainer.devices=2" +
             " --set 'trainer.strategy={class_path: ddp_spawn, init_args: {" + init_args + "}}'";
    };
    for (int r = 0; r < repeats; ++r) {
      rows[0].runs.push_back(run(arc + " --set module.name=" + module));
      for (size_t c = first_pinned; c < rows.size(); ++c)
        rows[c].runs.push_back(
            run("taskset -c " + std::to_string(cpus[c - first_pinned]) + " " + arc + " --set module.name=" + module));
      rows[1].runs.push_back(run_together(arc + " --set module.name=" + module, 2));
      rows[8].runs.push_back(rows[1].runs.back());
      rows[8].runs.back().json["train_sps"] = rows[1].runs.back().json["in_step_sps"];
      rows[2].runs.push_back(run(spawn("shared_memory: true")));
      rows[3].runs.push_back(run(spawn("shared_memory: false")));
      rows[6].runs.push_back(run(spawn("shared_memory: true, gradient_as_bucket_view: false")));
      // The CNN's kernels cost more along DDP's weights; the MLP's matrix products would only get
      // more efficient at batch 128, which says nothing about DDP. Accumulating two batches of 64
      // steps the optimizer on the 128 samples that DDP's step takes from both ranks (nearly DDP's
      // weights: only the order of the sums differs) with DDP's kernels of batch 64.
      if (model == "cnn") {
        rows[7].runs.push_back(run(arc + " --set module.name=" + module + " --set data.batch_size=128"));
        rows[9].runs.push_back(run(arc + " --set module.name=" + module + " --set trainer.accumulate_grad_batches=2"));
      }
      // The table comes at the end; this line keeps each round's main ratio where a time limit cuts
      // the benchmark short.
      std::cerr << model << ", round " << r + 1 << " of " << repeats << ": ddp_spawn x2 (shared memory) at "
                << std::fixed << std::setprecision(3)
                << rows[2].runs.back().json["train_sps"].get<double>() /
                       (2 * rows[0].runs.back().json["train_sps"].get<double>())
                << " of twice one process" << std::endl;
      if (!python) continue;
      rows[4].runs.push_back(run("TORCH_THREADS=1 " + python_command + " " + script + " --model " + model));
      rows[5].runs.push_back(run("TORCH_THREADS=1 " + python_command +
                                 " -m torch.distributed.run --nproc_per_node 2 -r 9:1 -t 9:1 --log_dir " +
                                 scratch_root() + "/torchrun " + script + " --model " + model));
    }
    const double reference = python ? rows[5].sps() : rows[3].sps();
    std::cout << "\n"
              << model << " (ratio = samples/s against "
              << (python ? "PyTorch DDP x2" : "Arclight ddp_spawn x2 through Gloo") << ")\n";
    std::cout << std::left << std::setw(38) << "run" << std::right << std::setw(12) << "samples/s" << std::setw(8)
              << "spread" << std::setw(8) << "ratio" << std::setw(12) << "1st step s" << std::setw(9) << "wall s"
              << std::setw(9) << "val_acc"
              << "  final params sha256\n";
    for (const auto& row : rows) {
      if (row.runs.empty()) continue;
      std::cout << std::left << std::setw(38) << row.name << std::right << std::fixed << std::setprecision(0)
                << std::setw(12) << row.sps() << std::setw(7) << 100 * row.sps_spread() << "%" << std::setprecision(3)
                << std::setw(8) << row.sps() / reference << std::setw(12) << row.first_step() << std::setprecision(2)
                << std::setw(9) << row.wall() << std::setprecision(4) << std::setw(9)
                << row.runs.front().json["val_acc"].get<double>() << "  "
                << row.runs.front().json["final_param_sha256"].get<std::string>().substr(0, 16) << "\n";
    }
    std::cout
        << std::setprecision(3) << "scaling efficiency, Arclight ddp_spawn x2 (shared memory) vs 2 x 1 process: "
        << rows[2].sps() / (2 * rows[0].sps()) << "\n"
        << "the machine's ceiling, 2 separate processes at once vs 2 x 1 process: "
        << rows[1].sps() / (2 * rows[0].sps()) << "\n"
        << "Arclight ddp_spawn x2 (shared memory) vs that ceiling: " << rows[2].sps() / rows[1].sps() << "\n"
        << "ranks in step go at the slower one's pace: 2 x the slower of the 2 separate processes vs 2 x 1 process: "
        << rows[8].sps() / (2 * rows[0].sps())
        << "; Arclight ddp_spawn x2 (shared memory) vs it: " << rows[2].sps() / rows[8].sps() << "\n"
        << "gradients in their buckets (gradient_as_bucket_view) vs copied back: " << rows[2].sps() / rows[6].sps()
        << "\n";
    if (python)
      std::cout << "PyTorch's own scaling, PyTorch DDP x2 vs 2 x PyTorch's 1 process: "
                << rows[5].sps() / (2 * rows[4].sps()) << "\n";
    // The VM's speed drifts within a run of this bench: each round's DDP run against a run of the same
    // round (`sps` and `step`: its samples/s and median step in round r), by samples/s and by the runs'
    // median steps, which leave out the stalls that a short run cannot average away.
    const auto paired_with = [&](const auto& sps, const auto& step) {
      std::vector<double> ratios, steps, ddp_steps;
      for (size_t r = 0; r < rows[2].runs.size(); ++r) {
        const auto& ddp = rows[2].runs[r].json;
        ratios.push_back(ddp["train_sps"].get<double>() / (2 * sps(r)));
        steps.push_back(step(r));
        ddp_steps.push_back(ddp["median_step_ms"].get<double>());
      }
      const auto [low, high] = std::minmax_element(ratios.begin(), ratios.end());
      std::ostringstream line;
      line << std::fixed << std::setprecision(3) << "median " << median(ratios) << " (" << *low << " to " << *high
           << "); by the runs' median steps (" << median(steps) << " ms against " << median(ddp_steps)
           << " ms): " << median(steps) / median(ddp_steps);
      return line.str();
    };
    const auto field = [&](size_t row, size_t r, const char* name) {
      return rows[row].runs[r].json[name].get<double>();
    };
    std::cout << "the same, each round's runs paired (batch 64 per rank): "
              << paired_with([&](size_t r) { return field(0, r, "train_sps"); },
                             [&](size_t r) { return field(0, r, "median_step_ms"); })
              << "\n";
    if (per_cpu) {
      const size_t a = first_pinned, b = first_pinned + 1;
      const double sps_a = rows[a].sps(), sps_b = rows[b].sps();
      std::cout << "each CPU on its own (1 process pinned to it): CPU " << cpus[0] << " " << std::setprecision(0)
                << sps_a << ", CPU " << cpus[1] << " " << sps_b << " samples/s, the slower at " << std::setprecision(3)
                << std::min(sps_a, sps_b) / std::max(sps_a, sps_b) << " of the faster\n"
                << "Arclight ddp_spawn x2 (shared memory) vs 2 x the slower CPU's 1 process, each round paired: "
                << paired_with(
                       [&](size_t r) { return std::min(field(a, r, "train_sps"), field(b, r, "train_sps")); },
                       [&](size_t r) { return std::max(field(a, r, "median_step_ms"), field(b, r, "median_step_ms")); })
                << "\n";
    }
    if (!rows[7].runs.empty())
      std::cout << "Arclight ddp_spawn x2 vs 2 x 1 process at batch 128 (DDP's global batch: nearly the same weights "
                << "step by step, so the same data-dependent kernel costs): " << rows[2].sps() / (2 * rows[7].sps())
                << "\n";
    if (!rows[9].runs.empty())
      std::cout
          << "Arclight ddp_spawn x2 vs 2 x 1 process accumulating 2 batches of 64 (nearly DDP's weights, its batch "
          << "per rank), each round paired: "
          << paired_with([&](size_t r) { return field(9, r, "train_sps"); },
                         [&](size_t r) { return field(9, r, "median_step_ms"); })
          << "\n";
    const auto sha = [&](size_t row) { return rows[row].runs.front().json["final_param_sha256"]; };
    std::cout << "final weights, shared memory vs Gloo: " << (sha(2) == sha(3) ? "bit-identical" : "DIFFERENT") << "\n";
    std::cout << "final weights, gradients in buckets vs copied: " << (sha(2) == sha(6) ? "bit-identical" : "DIFFERENT")
              << "\n";
    if (python)
      std::cout << "final weights, Arclight ddp_spawn x2 vs PyTorch DDP x2: "
                << (sha(2) == sha(5) ? "bit-identical" : "DIFFERENT") << "\n";
    Summary("arc_bench_ddp " + model)
        .add("1 process, samples/s", rows[0].sps(), 0)
        .add("ddp_spawn x2, samples/s", rows[2].sps(), 0)
        .add("of 2 x 1 process", rows[2].sps() / (2 * rows[0].sps()), 3)
        .add("machine's ceiling", rows[1].sps() / (2 * rows[0].sps()), 3)
        .add("PyTorch DDP x2, samples/s", python ? rows[5].sps() : Summary::kNotMeasured, 0)
        .add("vs PyTorch DDP", python ? rows[2].sps() / rows[5].sps() : Summary::kNotMeasured, 2)
        .add("weights as PyTorch DDP's", !python            ? "-"
                                         : sha(2) == sha(5) ? "bit-identical"
                                                            : "different")
        .print();
  }
  return 0;
} catch (const std::exception& error) {
  return arc::bench::failed("arc_bench_ddp", error);
}
