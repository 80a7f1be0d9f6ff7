// Precision on the canonical workloads: one epoch of the MLP and the CNN as fresh `arc train`
// commands, 32-true against bf16-mixed (and 64-true) in the same invocation. The thread count
// changes the order of float sums, and with it how far one epoch's accuracy lands from another's.
//   arc_bench_precision [repeats=1] [mlp,cnn] [threads=1]
#include "bench_util.h"

#include <iomanip>

int main(int argc, char** argv) try {
  using namespace arc::bench;
  const int repeats = static_cast<int>(whole_arg(argc, argv, 1, "repeats", 1));
  const auto models = names_arg(argc, argv, 2, "model", {"mlp", "cnn"}, "mlp,cnn");
  const int threads = static_cast<int>(whole_arg(argc, argv, 3, "threads", 1));
  torch::set_num_threads(threads);
  print_header("Precision: one epoch, " + std::to_string(threads) + " thread(s), median of " + std::to_string(repeats));
  std::cout << std::left << std::setw(24) << "run" << std::right << std::setw(12) << "samples/s" << std::setw(8)
            << "ratio" << std::setw(10) << "val_acc" << std::setw(10) << "d acc"
            << "\n";
  Summary summary("arc_bench_precision");
  for (const std::string model : {"mlp", "cnn"}) {
    if (!has(models, model)) continue;
    double base_sps = 0, base_acc = 0;
    for (const std::string precision : {"32-true", "bf16-mixed", "64-true"}) {
      std::vector<double> sps;
      double acc = 0;
      for (int r = 0; r < repeats; ++r) {
        const auto result = result_of(arc_train("cpu", threads) + " --set module.name=" + model +
                                      "_classifier --set trainer.precision=" + precision);
        sps.push_back(result["train_sps"].get<double>());
        acc = result["val_acc"].get<double>();
      }
      if (precision == "32-true") {
        base_sps = median(sps);
        base_acc = acc;
      }
      std::cout << std::left << std::setw(24) << model + " " + precision << std::right << std::fixed
                << std::setprecision(0) << std::setw(12) << median(sps) << std::setprecision(3) << std::setw(8)
                << median(sps) / base_sps << std::setprecision(4) << std::setw(10) << acc << std::setw(10)
                << acc - base_acc << "\n";
      if (precision == "bf16-mixed")
        summary.add(model + " bf16-mixed vs 32-true", median(sps) / base_sps, 2)
            .add(model + " val_acc 32-true", base_acc, 4)
            .add(model + " val_acc bf16-mixed", acc, 4);
    }
  }
  summary.print();
  return 0;
} catch (const std::exception& error) {
  return arc::bench::failed("arc_bench_precision", error);
}
