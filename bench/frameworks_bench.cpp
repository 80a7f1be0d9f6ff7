// One device, three ways: the canonical workloads trained by Arclight (`arc train`), by a plain
// PyTorch loop (bench/python/torch_workload.py) and by PyTorch Lightning
// (bench/python/lightning_workload.py), in 32-true and bf16-mixed, in the same invocation. Every
// run is a fresh command; the ratio is samples/s against the PyTorch loop at the same precision.
// On a GPU it adds Arclight's DDP rows: world size 1 on NCCL, and two ranks sharing the GPU
// through Gloo (NCCL refuses two ranks on one device).
//   arc_bench_frameworks [accelerator=gpu|cpu] [repeats=1] [models=mlp,cnn]
// The Python side runs under $ARC_BENCH_PYTHON, else the first of /usr/bin/python3 and python3
// that imports torch; a Lightning that does not import leaves its rows out, saying so.
#include "bench_util.h"

#include <cstdlib>
#include <iomanip>

int main(int argc, char** argv) try {
  using namespace arc::bench;
  const std::string accelerator = argc > 1 ? argv[1] : "gpu";
  const int repeats = static_cast<int>(whole_arg(argc, argv, 2, "repeats", 1));
  const auto models = names_arg(argc, argv, 3, "model", {"mlp", "cnn"}, "mlp,cnn");
  if (accelerator != "gpu" && accelerator != "cpu")
    throw UsageError("accelerator must be gpu or cpu, got '" + accelerator + "'");
  const bool gpu = accelerator == "gpu";
  if (gpu && !torch::cuda::is_available()) {
    std::cerr << "arc_bench_frameworks: no CUDA device is visible to this LibTorch; run it on a GPU machine "
                 "with a CUDA build, or pass cpu to compare on the CPU\n";
    return 2;
  }
  torch::set_num_threads(1);
  std::cout << std::unitbuf;  // each row shows as it is measured: a GPU table takes minutes
  print_header("Arclight vs a PyTorch loop vs PyTorch Lightning, one epoch on one " + accelerator +
               ", 1 CPU thread, median of " + std::to_string(repeats));
  if (gpu) std::cout << "GPU: " << torch::cuda::device_count() << " visible CUDA device(s)\n";
  const std::string python = arc::testing::python_with_torch();
  const bool lightning = !python.empty() && (arc::testing::imports(python, "lightning") ||
                                             arc::testing::imports(python, "pytorch_lightning"));
  if (python.empty()) std::cout << "(no python3 that imports torch: PyTorch and Lightning rows left out)\n";
  if (!python.empty() && !lightning) std::cout << "(Lightning does not import under " << python << ": rows left out)\n";
  const std::string scripts = std::string(ARC_SOURCE_DIR) + "/bench/python/";
  const std::string arc =
      arc_train(accelerator) + " --set trainer.devices=1 --set data.pin_memory=" + (gpu ? "true" : "false");

  for (const std::string model : {"mlp", "cnn"}) {
    if (!has(models, model)) continue;
    std::cout << "\n"
              << model << " (ratio = samples/s against the PyTorch loop at the same precision)\n"
              << std::left << std::setw(40) << "run" << std::right << std::setw(12) << "samples/s" << std::setw(8)
              << "ratio" << std::setw(12) << "1st step s" << std::setw(9) << "wall s" << std::setw(9) << "val_acc"
              << "\n";
    for (const std::string precision : {"32-true", "bf16-mixed"}) {
      const std::string arc_run =
          arc + " --set module.name=" + model + "_classifier --set trainer.precision=" + precision;
      const std::string python_args = " --model " + model + " --precision " + precision;
      std::vector<Row> rows = {
          {"Arclight " + precision, {}}, {"PyTorch loop " + precision, {}}, {"Lightning " + precision, {}}};
      if (gpu) {
        rows.push_back({"Arclight ddp_spawn x1 NCCL " + precision, {}});
        rows.push_back({"Arclight ddp_spawn x2 on 1 GPU, Gloo " + precision, {}});
      }
      for (int r = 0; r < repeats; ++r) {
        rows[0].runs.push_back(run(arc_run));
        if (!python.empty())
          rows[1].runs.push_back(run("TORCH_THREADS=1 " + python + " " + scripts + "torch_workload.py --device " +
                                     (gpu ? "cuda" : "cpu") + python_args));
        if (lightning)
          rows[2].runs.push_back(run("TORCH_THREADS=1 " + python + " " + scripts + "lightning_workload.py" +
                                     " --accelerator " + accelerator + python_args));
        if (!gpu) continue;
        rows[3].runs.push_back(run(arc_run + " --set trainer.strategy=ddp_spawn"));
        rows[4].runs.push_back(
            run(arc_run + " --set trainer.devices=0,0" +
                " --set 'trainer.strategy={class_path: ddp_spawn, init_args: " + "{process_group_backend: gloo}}'"));
      }
      const double reference = rows[1].runs.empty() ? rows[0].sps() : rows[1].sps();
      for (const auto& row : rows) {
        if (row.runs.empty()) continue;
        std::cout << std::left << std::setw(40) << row.name << std::right << std::fixed << std::setprecision(0)
                  << std::setw(12) << row.sps() << std::setprecision(3) << std::setw(8) << row.sps() / reference
                  << std::setw(12) << row.first_step() << std::setprecision(2) << std::setw(9) << row.wall()
                  << std::setprecision(4) << std::setw(9) << row.runs.front().json["val_acc"].get<double>() << "\n";
      }
      const auto against = [&](const Row& row) {
        return row.runs.empty() ? Summary::kNotMeasured : rows[0].sps() / row.sps();
      };
      const auto weights = [&](const Row& row) {
        if (row.runs.empty()) return std::string("-");
        return row.runs.front().json["final_param_sha256"] == rows[0].runs.front().json["final_param_sha256"]
                   ? std::string("bit-identical")
                   : std::string("different");
      };
      Summary("arc_bench_frameworks " + model + " " + precision)
          .add("Arclight, samples/s", rows[0].sps(), 0)
          .add("PyTorch loop, samples/s", rows[1].runs.empty() ? Summary::kNotMeasured : rows[1].sps(), 0)
          .add("Lightning, samples/s", rows[2].runs.empty() ? Summary::kNotMeasured : rows[2].sps(), 0)
          .add("vs PyTorch", against(rows[1]), 2)
          .add("vs Lightning", against(rows[2]), 2)
          .add("weights as PyTorch's", weights(rows[1]))
          .add("weights as Lightning's", weights(rows[2]))
          .print();
    }
  }
  return 0;
} catch (const std::exception& error) {
  return arc::bench::failed("arc_bench_frameworks", error);
}
