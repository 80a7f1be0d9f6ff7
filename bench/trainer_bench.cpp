// Per-step framework overhead: the Trainer against a hand-written LibTorch loop in the same
// process, on a tiny model and on the canonical MLP; and the CNN with and without malloc tuning.
// Prints a table with ratios against the hand loop, which runs in the same invocation.
#include "bench_util.h"

#include <arc/apps/examples/canonical_data.h>
#include <arc/apps/examples/classifier.h>
#include <arc/apps/examples/hand_loop.h>
#include <arc/apps/examples/workload.h>
#include <arc/arc.h>
#include <arc/core/detail/straggler_monitor.h>
#include <arc/strategies/detail/process_group.h>

#include <sys/resource.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iomanip>

namespace arc::bench {
namespace {

constexpr int64_t kTinySteps = 4000;
constexpr int64_t kTinyBatch = 8;

class Tiny : public TrainModule {
 public:
  explicit Tiny(bool log_loss) : log_loss_(log_loss) { linear = register_module("linear", torch::nn::Linear(32, 2)); }
  torch::Tensor training_step(Batch& batch, int64_t) override {
    auto loss = torch::nn::functional::cross_entropy(linear(batch[0]), batch[1]);
    if (log_loss_) log("train_loss", loss);
    return loss;
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.01))};
  }
  torch::nn::Linear linear{nullptr};

 private:
  bool log_loss_;
};

struct TinyData {
  torch::Tensor x = torch::randn({kTinySteps * kTinyBatch, 32});
  torch::Tensor y = torch::randint(0, 2, {kTinySteps * kTinyBatch}, torch::kLong);
};

double tiny_hand(const TinyData& data) {
  Tiny model(false);
  torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(0.01));
  std::vector<int64_t> order(static_cast<size_t>(kTinySteps * kTinyBatch));
  std::iota(order.begin(), order.end(), 0);
  return seconds([&] {
    for (int64_t step = 0; step < kTinySteps; ++step) {
      const auto index = torch::from_blob(order.data() + step * kTinyBatch, {kTinyBatch}, torch::kLong);
      const auto x = data.x.index_select(0, index);
      const auto y = data.y.index_select(0, index);
      sgd.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(model.linear(x), y);
      loss.backward();
      sgd.step();
    }
  });
}

// The simple profiler, counting the actions it times.
class CountingProfiler : public SimpleProfiler {
 public:
  void start(const std::string& action) override {
    ++actions;
    SimpleProfiler::start(action);
  }
  int64_t actions = 0;
};

double tiny_trainer(const TinyData& data, bool log_loss, bool defaults, std::shared_ptr<Profiler> profiler = nullptr) {
  Tiny model(log_loss);
  auto options = TrainerOptions().accelerator("cpu").max_epochs(1).num_threads(1).default_root_dir(scratch_root());
  if (!defaults) options.enable_progress_bar(false).enable_model_summary(false).enable_checkpointing(false);
  Trainer trainer(options, {}, {}, std::move(profiler));
  DataSource source(std::make_shared<TensorDataset>(std::vector<torch::Tensor>{data.x, data.y}),
                    DataLoaderOptions(kTinyBatch));
  return seconds([&] { trainer.fit(model, source); });
}

double mlp_hand() {
  examples::MlpClassifier model(Config(nlohmann::json::object(), "module"));
  const auto& all = workload::data();
  const auto order = workload::epoch_order(workload::kTrainSamples, 0);
  return seconds([&] {
    examples::train_by_hand(
        model, [&](const torch::Tensor& x) { return model.forward(x); }, all.x.slice(0, 0, workload::kTrainSamples),
        all.y.slice(0, 0, workload::kTrainSamples), order, 64, 0.05, 0.9);
  });
}

double mlp_trainer(bool defaults) {
  examples::MlpClassifier model(Config(nlohmann::json::object(), "module"));
  examples::CanonicalData data(Config(nlohmann::json::object(), "data"));
  auto options =
      TrainerOptions().accelerator("cpu").max_epochs(1).num_threads(1).limit_val_batches(BatchAmount::fraction(0.0));
  options.default_root_dir(scratch_root());
  if (!defaults) options.enable_progress_bar(false).enable_model_summary(false).enable_checkpointing(false);
  Trainer trainer(options);
  return seconds([&] { trainer.fit(model, data); });
}

struct ChildRun {
  double sps = 0;
  long minor_faults = 0;
};

// Runs `arc train` on the CNN in a fresh process: malloc settings are per process.
ChildRun cnn_child(bool tune_malloc, int64_t batches) {
  const std::string command = arc_train() +
                              " --set module.name=cnn_classifier --set trainer.limit_val_batches=0"
                              " --set trainer.limit_train_batches=" +
                              std::to_string(batches) +
                              " --set trainer.tune_malloc=" + (tune_malloc ? "true" : "false");
  rusage before{};
  getrusage(RUSAGE_CHILDREN, &before);
  const auto result = result_of(command);
  rusage after{};
  getrusage(RUSAGE_CHILDREN, &after);
  return {result["train_sps"].get<double>(), after.ru_minflt - before.ru_minflt};
}

void row(const std::string& name, double value, const std::string& unit, double ratio) {
  std::cout << std::left << std::setw(44) << name << std::right << std::setw(12) << std::fixed << std::setprecision(2)
            << value << " " << std::setw(10) << std::left << unit << std::right << std::setw(8) << std::setprecision(3)
            << ratio << "\n";
}

}  // namespace
}  // namespace arc::bench

int main(int argc, char** argv) try {
  using namespace arc::bench;
  const int repeats = static_cast<int>(whole_arg(argc, argv, 1, "repeats", 5));
  const int64_t cnn_batches = whole_arg(argc, argv, 2, "cnn_steps", 400);
  torch::set_num_threads(1);
  print_header("Trainer overhead vs a hand-written LibTorch loop (1 thread, " + std::to_string(repeats) +
               " runs, median)");
  arc::console().set_level(spdlog::level::warn);

  TinyData tiny;
  std::vector<double> hand, bare, logged, defaults, profiled;
  for (int r = 0; r < repeats; ++r) {
    hand.push_back(tiny_hand(tiny));
    bare.push_back(tiny_trainer(tiny, false, false));
    logged.push_back(tiny_trainer(tiny, true, false));
    defaults.push_back(tiny_trainer(tiny, true, true));
    profiled.push_back(tiny_trainer(tiny, true, true, std::make_shared<arc::SimpleProfiler>()));
  }
  auto counting = std::make_shared<CountingProfiler>();
  tiny_trainer(tiny, true, true, counting);
  arc::SimpleProfiler alone;
  const std::string action = "[Callback]ModelCheckpoint.on_train_batch_end";
  constexpr int kActions = 1000000;
  const double action_seconds = seconds([&] {
    for (int i = 0; i < kActions; ++i) arc::ProfileScope scope(&alone, action);
  });
  // DDP's straggler statistics: what each step adds, and each logging step's report with its
  // all-gather (here over a one-rank Gloo group; over two ranks' shared memory, see arc_bench_allreduce).
  const auto solo = arc::make_collectives(arc::RendezvousOptions{});
  arc::StragglerMonitor monitor(*solo);
  constexpr int kMonitorReports = 4000, kLogEvery = 50;
  double adding = 0, reporting = 0;
  for (int r = 0; r < kMonitorReports; ++r) {
    adding += seconds([&] {
      for (int i = 0; i < kLogEvery; ++i) monitor.add(1e-4, 1e-3, 2e-4);
    });
    reporting += seconds([&] { monitor.report(); });
  }
  const auto per_step_us = [](const std::vector<double>& runs) { return median(runs) / kTinySteps * 1e6; };
  const double hand_us = per_step_us(hand);
  std::cout << std::left << std::setw(44) << "case" << std::right << std::setw(12) << "value"
            << " " << std::setw(10) << std::left << "unit" << std::right << std::setw(8) << "ratio"
            << "\n";
  row("tiny Linear(32,2) b8: hand loop", hand_us, "us/step", 1.0);
  row("tiny: Trainer, no callbacks or checkpoints", per_step_us(bare), "us/step", per_step_us(bare) / hand_us);
  row("tiny: Trainer + log() per step", per_step_us(logged), "us/step", per_step_us(logged) / hand_us);
  row("tiny: Trainer + log() + all defaults", per_step_us(defaults), "us/step", per_step_us(defaults) / hand_us);
  row("tiny: overhead, no callbacks", per_step_us(bare) - hand_us, "us/step", 0);
  row("tiny: overhead, log() + all defaults", per_step_us(defaults) - hand_us, "us/step", 0);
  row("tiny: log() + all defaults + simple profiler", per_step_us(profiled), "us/step",
      per_step_us(profiled) / hand_us);
  row("tiny: simple profiler's cost", per_step_us(profiled) - per_step_us(defaults), "us/step", 0);
  row("tiny: actions the profiler times", static_cast<double>(counting->actions) / kTinySteps, "per step", 0);
  row("simple profiler: one action (start + stop)", action_seconds / kActions * 1e9, "ns", 0);
  row("DDP straggler stats: per step", adding / (kMonitorReports * kLogEvery) * 1e9, "ns", 0);
  row("DDP straggler stats: report (1-rank gather)", reporting / kMonitorReports * 1e6, "us", 0);

  std::vector<double> mlp_h, mlp_t, mlp_d;
  for (int r = 0; r < std::max(1, repeats / 2); ++r) {
    mlp_h.push_back(mlp_hand());
    mlp_t.push_back(mlp_trainer(false));
    mlp_d.push_back(mlp_trainer(true));
  }
  const double hand_sps = 60000 / median(mlp_h);
  row("MLP epoch: hand loop", hand_sps, "samples/s", 1.0);
  row("MLP epoch: Trainer, no callbacks", 60000 / median(mlp_t), "samples/s", 60000 / median(mlp_t) / hand_sps);
  row("MLP epoch: Trainer, all defaults", 60000 / median(mlp_d), "samples/s", 60000 / median(mlp_d) / hand_sps);

  std::vector<ChildRun> plain, tuned;
  for (int r = 0; r < std::max(1, repeats / 2); ++r) {
    plain.push_back(cnn_child(false, cnn_batches));
    tuned.push_back(cnn_child(true, cnn_batches));
  }
  const auto sps = [](const std::vector<ChildRun>& runs) {
    std::vector<double> v;
    for (const auto& run : runs) v.push_back(run.sps);
    return median(v);
  };
  const double plain_sps = sps(plain);
  row("CNN " + std::to_string(cnn_batches) + " steps: glibc malloc defaults", plain_sps, "samples/s", 1.0);
  row("CNN: tune_malloc (Trainer default)", sps(tuned), "samples/s", sps(tuned) / plain_sps);
  row("CNN: minor page faults, defaults", static_cast<double>(plain.front().minor_faults), "faults", 1.0);
  row("CNN: minor page faults, tune_malloc", static_cast<double>(tuned.front().minor_faults), "faults",
      static_cast<double>(tuned.front().minor_faults) / static_cast<double>(plain.front().minor_faults));
  Summary("arc_bench_trainer")
      .add("overhead per step, us", per_step_us(defaults) - hand_us, 1)
      .add("MLP epoch vs hand loop", 60000 / median(mlp_d) / hand_sps, 3)
      .add("simple profiler per step, us", per_step_us(profiled) - per_step_us(defaults), 1)
      .add("CNN tune_malloc vs glibc defaults", sps(tuned) / plain_sps, 2)
      .print();
  return 0;
} catch (const std::exception& error) {
  return arc::bench::failed("arc_bench_trainer", error);
}
