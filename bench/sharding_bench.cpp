// Sharded data parallel (strategy fsdp) against DDP, in one invocation:
// - memory: a 12-layer MLP of 4096 units (201M parameters) trained with Adam for 3 steps on 2 and 4
//   ranks (each layer an arc::ShardedUnit, made in the constructor, or for "FULL_SHARD late" in
//   configure_model, where each unit is sharded as it is made); each rank's peak resident memory (VmHWM, which
//   counts the shared-memory gradient buckets that a rank maps), its peak up to fit's start (the model made and set
//   up: "setup") and the bytes of parameters, gradients and optimizer state it holds at the end;
// - speed: samples/s of the canonical MLP and CNN on 2 ranks, DDP and each sharding in alternated
//   rounds (fresh commands), against PyTorch DDP where a python3 with torch is found.
// - prefetch: samples/s of FULL_SHARD over Gloo with its gathers started ahead or not
//   (backward_prefetch, forward_prefetch), against none, in alternated rounds.
//   arc_bench_sharding [repeats=3] [parts=memory,speed] [worlds=2,4] [models=mlp,cnn]
// Each memory run is this program again (`--memory-run STRATEGY SHARDING DEVICES LATE`), started fresh.
#include "bench_util.h"

#include <arc/arc.h>

#include <nlohmann/json.hpp>

#include <iomanip>

namespace {

constexpr int64_t kWidth = 4096, kLayers = 12, kBatch = 8;

// The peak resident memory of this process, in bytes (VmHWM of /proc/self/status).
int64_t peak_resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

int64_t bytes(const torch::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

// kLayers square layers with ReLUs between, each an arc::ShardedUnit; the loss is the outputs' mean
// square.
class DeepMlp : public arc::TrainModule {
 public:
  explicit DeepMlp(bool late) : late_(late) {
    if (!late_) make_layers();
  }
  void configure_model() override {
    if (late_ && layers.empty()) make_layers();
  }
  torch::Tensor training_step(arc::Batch& batch, int64_t) override {
    auto x = batch[0];
    for (size_t i = 0; i < layers.size(); ++i) {
      x = layers[i](x);
      if (i + 1 < layers.size()) x = torch::relu(x);
    }
    return x.pow(2).mean();
  }
  std::vector<arc::OptimizerConfig> configure_optimizers() override {
    return {std::make_shared<torch::optim::Adam>(parameters(), 1e-4)};
  }
  void on_fit_start() override { setup_peak_ = peak_resident_bytes(); }
  // Every rank's peaks and held bytes to rank 0, which prints them as the RESULT line.
  void on_train_end() override {
    int64_t params = 0, grads = 0, state = 0;
    // A parameter's storage: none under FULL_SHARD where another rank owns it.
    for (const auto& p : parameters()) params += static_cast<int64_t>(p.storage().nbytes()), grads += bytes(p.grad());
    for (const auto& entry : trainer().optimizer_configs().front().optimizer->state())
      if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(entry.second.get()))
        state += bytes(adam->exp_avg()) + bytes(adam->exp_avg_sq()) + bytes(adam->max_exp_avg_sq());
    const auto mine = torch::tensor({peak_resident_bytes(), params, grads, state, setup_peak_});
    const auto all = trainer().strategy().all_gather(mine);
    if (!trainer().is_global_zero()) return;
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& rank : all) {
      const auto* v = rank.data_ptr<int64_t>();
      ranks.push_back({{"peak", v[0]}, {"params", v[1]}, {"grads", v[2]}, {"state", v[3]}, {"setup", v[4]}});
    }
    std::cout << "RESULT " << nlohmann::json{{"ranks", ranks}}.dump() << std::endl;
  }
  std::vector<arc::ShardedUnit<torch::nn::Linear>> layers;

 private:
  void make_layers() {
    torch::manual_seed(0);
    for (int64_t i = 0; i < kLayers; ++i)
      layers.push_back(register_module("fc" + std::to_string(i),
                                       arc::ShardedUnit<torch::nn::Linear>(torch::nn::Linear(kWidth, kWidth))));
  }
  bool late_;
  int64_t setup_peak_ = 0;
};

int memory_run(const std::string& strategy, const std::string& sharding, int64_t devices, bool late) {
  arc::TrainerOptions options;
  options.strategy(strategy).devices(arc::Devices::of_count(devices)).accelerator("cpu").max_steps(3).num_threads(1);
  options.ddp().sharding_strategy(sharding);
  options.logger(false).enable_checkpointing(false).enable_progress_bar(false).enable_model_summary(false);
  options.default_root_dir(arc::bench::scratch_root());
  DeepMlp module(late);
  torch::manual_seed(1);
  const auto inputs = torch::randn({kBatch * 3 * devices, kWidth});
  const auto data = std::make_shared<arc::TensorDataset>(std::vector<torch::Tensor>{inputs});
  arc::Trainer(options).fit(module, arc::DataSource(data, arc::DataLoaderOptions(kBatch)));
  return 0;
}

struct Setup {
  std::string name, strategy, sharding;
  bool late = false;
};

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

void memory(const std::string& self, const std::vector<int64_t>& worlds) {
  const std::vector<Setup> setups = {{"DDP (ddp_spawn)", "ddp_spawn", "auto"},
                                     {"fsdp SHARD_OPTIMIZER", "fsdp", "SHARD_OPTIMIZER"},
                                     {"fsdp SHARD_GRAD_OP", "fsdp", "SHARD_GRAD_OP"},
                                     {"fsdp FULL_SHARD", "fsdp", "FULL_SHARD"},
                                     {"fsdp FULL_SHARD late", "fsdp", "FULL_SHARD", true}};
  const double parameters = static_cast<double>(kLayers * (kWidth * kWidth + kWidth));
  std::cout << "memory: " << kLayers << " layers of " << kWidth << " units, " << std::fixed << std::setprecision(1)
            << parameters / 1e6 << "M parameters, Adam, batch " << kBatch << " per rank, 3 steps\n";
  for (const int64_t world : worlds) {
    std::cout << "\nworld " << world << " (MiB per rank: the largest peak, and the mean of the bytes held)\n"
              << std::left << std::setw(24) << "run" << std::right << std::setw(11) << "peak" << std::setw(8) << "ratio"
              << std::setw(11) << "setup" << std::setw(11) << "params" << std::setw(11) << "grads" << std::setw(11)
              << "optimizer" << std::setw(11) << "wall s\n";
    double baseline = 0;
    arc::bench::Summary summary("arc_bench_sharding memory world " + std::to_string(world));
    for (const auto& setup : setups) {
      const auto result = arc::bench::run(self + " --memory-run " + setup.strategy + " " + setup.sharding + " " +
                                          std::to_string(world) + (setup.late ? " late" : " constructor"));
      int64_t peak = 0, setup_peak = 0;
      double params = 0, grads = 0, state = 0;
      for (const auto& rank : result.json["ranks"]) {
        peak = std::max(peak, rank["peak"].get<int64_t>());
        setup_peak = std::max(setup_peak, rank["setup"].get<int64_t>());
        params += rank["params"].get<double>() / world;
        grads += rank["grads"].get<double>() / world;
        state += rank["state"].get<double>() / world;
      }
      if (baseline == 0) baseline = static_cast<double>(peak);
      std::cout << std::left << std::setw(24) << setup.name << std::right << std::setprecision(0) << std::setw(11)
                << mib(peak) << std::setprecision(3) << std::setw(8) << static_cast<double>(peak) / baseline
                << std::setprecision(0) << std::setw(11) << mib(setup_peak) << std::setw(11) << params / (1 << 20)
                << std::setw(11) << grads / (1 << 20) << std::setw(11) << state / (1 << 20) << std::setprecision(1)
                << std::setw(10) << result.wall_s << "\n";
      const auto name = setup.sharding + (setup.late ? " late" : "");
      if (setup.strategy == "ddp_spawn") {
        summary.add("DDP peak MiB", mib(peak), 0);
      } else {
        summary.add(name + " peak MiB", mib(peak), 0).add(name + " of DDP's", static_cast<double>(peak) / baseline, 3);
      }
      if (setup.sharding == "FULL_SHARD") summary.add(name + " setup MiB", mib(setup_peak), 0);
    }
    summary.print();
  }
}

// Prints `rows` (alternated rounds' medians) with their ratios to the first and the first 16 hex
// digits of each row's final weights' digest.
void print_rows(const std::string& title, const std::vector<arc::bench::Row>& rows) {
  std::cout << "\n"
            << title << "\n"
            << std::left << std::setw(34) << "run" << std::right << std::setw(12) << "samples/s" << std::setw(8)
            << "spread" << std::setw(8) << "ratio"
            << "  final params sha256\n";
  for (const auto& row : rows) {
    if (row.runs.empty()) continue;
    std::cout << std::left << std::setw(34) << row.name << std::right << std::fixed << std::setprecision(0)
              << std::setw(12) << row.sps() << std::setw(7) << 100 * row.sps_spread() << "%" << std::setprecision(3)
              << std::setw(8) << row.sps() / rows[0].sps() << "  "
              << row.runs.front().json["final_param_sha256"].get<std::string>().substr(0, 16) << "\n";
  }
}

// Whether row `r`'s final weights are the first row's.
std::string same_weights(const std::vector<arc::bench::Row>& rows, size_t r) {
  return rows[r].runs.front().json["final_param_sha256"] == rows[0].runs.front().json["final_param_sha256"]
             ? "bit-identical"
             : "DIFFERENT";
}

// An `arc train` of `module` on 2 ranks under `strategy` with `init_args` (YAML flow mapping entries).
std::string spawn(const std::string& module, const std::string& strategy, const std::string& init_args) {
  return arc::bench::arc_train() + " --set module.name=" + module +
         " --set trainer.devices=2 --set 'trainer.strategy={class_path: " + strategy + ", init_args: {" + init_args +
         "}}'";
}

std::string module_of(const std::string& model) { return model == "mlp" ? "mlp_classifier" : "cnn_classifier"; }

void speed(int repeats, const std::vector<std::string>& models) {
  using namespace arc::bench;
  const std::string script = std::string(ARC_SOURCE_DIR) + "/bench/python/torch_workload.py";
  const std::string python = arc::testing::python_with_torch();
  for (const auto& model : models) {
    const auto sharded = [&](const std::string& strategy, const std::string& sharding) {
      return spawn(module_of(model), strategy, "sharding_strategy: " + sharding);
    };
    std::vector<Row> rows = {{"DDP (ddp_spawn x2, shm)", {}},
                             {"fsdp SHARD_GRAD_OP x2", {}},
                             {"fsdp SHARD_OPTIMIZER x2", {}},
                             {"fsdp FULL_SHARD x2", {}},
                             {"PyTorch DDP x2 (torchrun)", {}}};
    for (int r = 0; r < repeats; ++r) {
      rows[0].runs.push_back(run(sharded("ddp_spawn", "auto")));
      rows[1].runs.push_back(run(sharded("fsdp", "SHARD_GRAD_OP")));
      rows[2].runs.push_back(run(sharded("fsdp", "SHARD_OPTIMIZER")));
      rows[3].runs.push_back(run(sharded("fsdp", "FULL_SHARD")));
      if (!python.empty())
        rows[4].runs.push_back(run("TORCH_THREADS=1 " + python + " -m torch.distributed.run --nproc_per_node 2 " +
                                   "-r 9:1 -t 9:1 --log_dir " + scratch_root() + "/torchrun " + script + " --model " +
                                   model));
    }
    print_rows("speed, " + model + " (" + std::to_string(repeats) + " alternated rounds, median; ratio against DDP)",
               rows);
    std::cout << "final weights as DDP's: SHARD_GRAD_OP " << same_weights(rows, 1) << ", SHARD_OPTIMIZER "
              << same_weights(rows, 2) << ", FULL_SHARD " << same_weights(rows, 3) << "\n";
    const bool torch_rows = !rows[4].runs.empty();
    Summary("arc_bench_sharding speed " + model)
        .add("SHARD_GRAD_OP of DDP", rows[1].sps() / rows[0].sps(), 3)
        .add("SHARD_OPTIMIZER of DDP", rows[2].sps() / rows[0].sps(), 3)
        .add("FULL_SHARD of DDP", rows[3].sps() / rows[0].sps(), 3)
        .add("SHARD_GRAD_OP vs PyTorch DDP", torch_rows ? rows[1].sps() / rows[4].sps() : Summary::kNotMeasured, 2)
        .add("FULL_SHARD vs PyTorch DDP", torch_rows ? rows[3].sps() / rows[4].sps() : Summary::kNotMeasured, 2)
        .print();
  }
}

// FULL_SHARD's gathers started ahead or not, over Gloo (whose collectives run on its own threads;
// shared memory has no helper thread where the ranks take every core).
void prefetch(int repeats, const std::vector<std::string>& models) {
  using namespace arc::bench;
  const std::vector<std::pair<std::string, std::string>> settings = {
      {"FULL_SHARD gloo, NONE", "backward_prefetch: NONE"},
      {"FULL_SHARD gloo, BACKWARD_PRE", "backward_prefetch: BACKWARD_PRE"},
      {"FULL_SHARD gloo, BACKWARD_POST", "backward_prefetch: BACKWARD_POST"},
      {"FULL_SHARD gloo, PRE + forward", "backward_prefetch: BACKWARD_PRE, forward_prefetch: true"}};
  for (const auto& model : models) {
    std::vector<Row> rows;
    for (const auto& setting : settings) rows.push_back({setting.first, {}});
    for (int r = 0; r < repeats; ++r)
      for (size_t s = 0; s < settings.size(); ++s)
        rows[s].runs.push_back(run(spawn(
            module_of(model), "fsdp", "sharding_strategy: FULL_SHARD, shared_memory: false, " + settings[s].second)));
    print_rows("gathers started ahead, " + model + " (" + std::to_string(repeats) +
                   " alternated rounds, median; ratio against NONE)",
               rows);
    std::cout << "final weights as NONE's: BACKWARD_PRE " << same_weights(rows, 1) << ", BACKWARD_POST "
              << same_weights(rows, 2) << ", PRE + forward " << same_weights(rows, 3) << "\n";
    Summary("arc_bench_sharding prefetch " + model)
        .add("BACKWARD_PRE of NONE", rows[1].sps() / rows[0].sps(), 3)
        .add("BACKWARD_POST of NONE", rows[2].sps() / rows[0].sps(), 3)
        .add("PRE + forward of NONE", rows[3].sps() / rows[0].sps(), 3)
        .print();
  }
}

}  // namespace

int main(int argc, char** argv) try {
  using namespace arc::bench;
  if (argc == 6 && std::string(argv[1]) == "--memory-run")
    return memory_run(argv[2], argv[3], std::stoll(argv[4]), std::string(argv[5]) == "late");
  const int repeats = static_cast<int>(whole_arg(argc, argv, 1, "repeats", 3));
  const auto parts = names_arg(argc, argv, 2, "part", {"memory", "speed", "prefetch"}, "memory,speed");
  const auto world_names = names_arg(argc, argv, 3, "world", {"2", "3", "4"}, "2,4");
  std::vector<int64_t> worlds;
  for (const auto& name : world_names) worlds.push_back(std::stoll(name));
  torch::set_num_threads(1);
  print_header("Sharded data parallel (fsdp) against DDP");
  if (has(parts, "memory")) memory(std::filesystem::read_symlink("/proc/self/exe").string(), worlds);
  const auto models = names_arg(argc, argv, 4, "model", {"mlp", "cnn"}, "mlp,cnn");
  if (has(parts, "speed")) speed(repeats, models);
  if (has(parts, "prefetch")) prefetch(repeats, models);
  return 0;
} catch (const std::exception& error) {
  return arc::bench::failed("arc_bench_sharding", error);
}
