// A training program for the distributed tests: trains a small MLP under the strategy asked for,
// in the scenarios asked for, and reports what it saw.
//   ddp_probe --strategy ddp_spawn --devices 2 --steps 30 [--<setting> value ...]
//             [--<scenario> value | --<scenario>.<setting> value ...]
// The settings of the run are the Trainer's options and the probe's files; each scenario (a rank
// that fails, stalls, stops alone; checkpoints; validation; ...) is named, and its settings are
// dotted under its name: `--fail.kind sigkill --fail.rank 1 --fail.step 5`. `ddp_probe --help`
// lists them all (the table kFlags below); an unknown one is an error.
//
// Reports: every rank prints "STOPPED <rank> <global step>" and "VALIDATIONS <rank> <fit's
// validations>" after fit, with a ModelCheckpoint "BEST <rank> <best_model_path> <best score, or
// none>", with a ReduceLROnPlateau "LR <rank> <its rate>"; rank 0 prints "PROBE <json>" (the
// callback metrics, global_step, world_size) and writes its weights to --out. Rank 0 prints
// "TIMING start <step> <unix ms> <attempt>" at its first step and the failing rank "TIMING kill
// <step> <unix ms>" before it kills itself, for the launcher tests and benchmarks.
#include "support/command.h"
#include "support/row_stream.h"
#include "support/shm_maps.h"

#include <arc/arc.h>

#include <torch/torch.h>

#include <sys/resource.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

namespace {

using arc::testing::unix_ms;

void fail_on_purpose(const std::string& kind, int64_t step) {
  std::cout << "TIMING kill " << step << " " << unix_ms() << std::endl;
  if (kind == "exception") throw std::runtime_error("probe failure on purpose");
  TORCH_CHECK(kind != "torch", "probe LibTorch failure on purpose");
  if (kind == "exit3") std::exit(3);
  if (kind == "segv") std::raise(SIGSEGV);
  if (kind == "sigkill") std::raise(SIGKILL);
  if (kind == "sigint") std::raise(SIGINT);
}

// The run's settings, then each scenario's (a rank of -1 is none).
struct Args {
  std::string strategy = "ddp_spawn";
  int64_t devices = 2, batch = 16, steps = 30, accumulate = 1, num_nodes = 1, log_every = 0, elastic_every = 0;
  int64_t step_ms = 0;
  double timeout = 30, collective_timeout = 300, max_time = 0, clip = 0, bucket_mb = 0;
  std::string optimizer = "sgd", clip_algorithm = "norm", sharding = "auto", state_dict_type = "full",
              backward_prefetch = "BACKWARD_PRE";
  bool forward_prefetch = false;
  bool shared_memory = true, static_graph = false, find_unused = false, sync_batchnorm = false;
  bool async_checkpoint = false, out_every_rank = false, root_per_rank = false;
  std::string out, root, precision = "32-true", loggers, ckpt_path, even_batches = "error", loop = "trainer";
  // The CPU unless asked: "auto" would take a GPU wherever one is, and the tests count CPU ranks.
  std::string accelerator = "cpu", device_list, process_group_backend = "auto";

  struct {
    std::string kind;
    int64_t rank = -1, step = -1, attempt = -1, node = -1;
  } fail;
  struct {
    int64_t rank = -1, step = -1, ms = 0;
  } stall;
  struct {
    int64_t rank = -1, ms = 0;
  } slow, late, slow_fit_start;
  struct {
    int64_t rank = -1, step = -1;
  } stop;
  struct {
    int64_t rank = -1, batch = -1;
  } skip, spike;
  int64_t early_stop_rank = -1, small_disk_bytes = 0;
  struct {
    int64_t every = 0;
    double seconds = 0;
    std::string monitor;
    bool save_last = false;
  } checkpoints;
  struct {
    int64_t every = 0, stream = 0;
    double every_seconds = 0;
    bool step_sync = false;
  } val;
  struct {
    bool on = false;
    int64_t uneven_drop = 0;
  } user_shard;
  struct {
    int64_t rank = -1;
    bool bias_elsewhere = false;
  } freeze;
  struct {
    bool rank_named = false, rank_value = false, from_hooks = false;
  } log;
  struct {
    std::string metric;
    bool count_syncs = false;
  } watch;
  // The custom loop's state: saved after step save_at to `state` (Fabric::save), or loaded from
  // `resume` before it starts.
  struct {
    int64_t save_at = -1;
    std::string state, resume;
  } custom;
  int64_t stream = 0, combined = 0, gather = 0, finetune = -1;
  bool batchnorm = false, spare = false, toggle = false, fit_again = false, build_late = false, validate_after = false;
  std::string plateau, prepare_log;
};

int64_t integer(const std::string& value) { return std::stoll(value); }
double number(const std::string& value) { return std::stod(value); }
bool flag(const std::string& value) { return value == "1"; }
const std::string& text(const std::string& value) { return value; }

// One command-line flag: its name, what it sets, and what it does.
struct Flag {
  const char* name;
  void (*set)(Args&, const std::string&);
  const char* help;
};

// clang-format off
#define ARC_PROBE_FLAG(name, field, read, help) \
  Flag { name, [](Args& a, const std::string& value) { a.field = read(value); }, help }
// clang-format on

// Every flag: the run's settings first, then the scenarios, each under its name.
const std::vector<Flag> kFlags = {
    ARC_PROBE_FLAG("--strategy", strategy, text, "the Trainer's strategy"),
    ARC_PROBE_FLAG("--devices", devices, integer, "processes per node"),
    ARC_PROBE_FLAG("--device-list", device_list, text, "devices as indices (0,0: two ranks on device 0)"),
    ARC_PROBE_FLAG("--accelerator", accelerator, text, "cpu (default) or gpu"),
    ARC_PROBE_FLAG("--num-nodes", num_nodes, integer, "TrainerOptions::num_nodes"),
    ARC_PROBE_FLAG("--batch", batch, integer, "batch size of the training data"),
    ARC_PROBE_FLAG("--steps", steps, integer, "max_steps"),
    ARC_PROBE_FLAG("--accumulate", accumulate, integer, "accumulate_grad_batches"),
    ARC_PROBE_FLAG("--precision", precision, text, "the Trainer's precision"),
    ARC_PROBE_FLAG("--max-time", max_time, number, "max_time in seconds (and 2 validation batches per run)"),
    ARC_PROBE_FLAG("--log-every", log_every, integer, "log_every_n_steps"),
    ARC_PROBE_FLAG("--step-ms", step_ms, integer, "every rank sleeps that long in every training_step"),
    ARC_PROBE_FLAG("--timeout", timeout, number, "the DDP strategy's timeout"),
    ARC_PROBE_FLAG("--collective-timeout", collective_timeout, number, "the DDP strategy's collective_timeout"),
    ARC_PROBE_FLAG("--shared-memory", shared_memory, flag, "0: Gloo among the ranks of a machine"),
    ARC_PROBE_FLAG("--process-group-backend", process_group_backend, text, "auto, nccl or gloo"),
    ARC_PROBE_FLAG("--static-graph", static_graph, flag, "DDP's static_graph"),
    ARC_PROBE_FLAG("--sharding", sharding, text, "fsdp's sharding_strategy"),
    ARC_PROBE_FLAG("--state-dict-type", state_dict_type, text, "fsdp's state_dict_type: full or sharded"),
    ARC_PROBE_FLAG("--forward-prefetch", forward_prefetch, flag, "fsdp's forward_prefetch"),
    ARC_PROBE_FLAG("--backward-prefetch", backward_prefetch, text, "fsdp's backward_prefetch"),
    ARC_PROBE_FLAG("--bucket-mb", bucket_mb, number, "first_bucket_mb and bucket_cap_mb (0: their defaults)"),
    ARC_PROBE_FLAG("--optimizer", optimizer, text,
                   "sgd (momentum 0.9, the default), adam, adamw (weight decay) or lbfgs"),
    ARC_PROBE_FLAG("--clip", clip, number, "gradient_clip_val"),
    ARC_PROBE_FLAG("--clip-algorithm", clip_algorithm, text, "gradient_clip_algorithm"),
    ARC_PROBE_FLAG("--find-unused", find_unused, flag, "DDP's find_unused_parameters"),
    ARC_PROBE_FLAG("--sync-batchnorm", sync_batchnorm, flag, "TrainerOptions::sync_batchnorm"),
    ARC_PROBE_FLAG("--even-batches", even_batches, text, "the option for the ranks' different batch counts"),
    ARC_PROBE_FLAG("--elastic-every", elastic_every, integer, "elastic_checkpoint_every_n_steps"),
    ARC_PROBE_FLAG("--async-checkpoint", async_checkpoint, flag, "async_checkpointing"),
    ARC_PROBE_FLAG("--ckpt-path", ckpt_path, text, "fit's ckpt_path"),
    ARC_PROBE_FLAG("--root", root, text, "default_root_dir (without it nothing is logged)"),
    ARC_PROBE_FLAG("--root-per-rank", root_per_rank, flag, "each rank's root is ROOT/rank<r>, a disk of its own"),
    ARC_PROBE_FLAG("--loggers", loggers, text, "a CSVLogger and a TensorBoardLogger in DIR, made on every rank"),
    ARC_PROBE_FLAG("--out", out, text, "rank 0 writes its final weights there (floats, in order)"),
    ARC_PROBE_FLAG("--out-every-rank", out_every_rank, flag, "every rank writes its weights to OUT.<rank>"),
    {"--tag", [](Args&, const std::string&) {}, "anything: names the processes (kill_tagged)"},
    // Failures.
    ARC_PROBE_FLAG("--fail.kind", fail.kind, text,
                   "fail: exception, torch (a LibTorch error), exit3, segv, sigkill or sigint, at a step"),
    ARC_PROBE_FLAG("--fail.rank", fail.rank, integer, "fail: the rank that fails"),
    ARC_PROBE_FLAG("--fail.node", fail.node, integer, "fail: every rank of that node fails"),
    ARC_PROBE_FLAG("--fail.step", fail.step, integer, "fail: at that global step"),
    ARC_PROBE_FLAG("--fail.attempt", fail.attempt, integer, "fail: only in that start of the job (restart count)"),
    ARC_PROBE_FLAG("--build-late", build_late, flag, "the layers are made in configure_model"),
    ARC_PROBE_FLAG("--validate-after", validate_after, flag, "validate once more after fit and report"),
    ARC_PROBE_FLAG("--fit-again", fit_again, flag,
                   "after fit failed, fit once more with a new Trainer and print \"probe: fit again: <error>\""),
    ARC_PROBE_FLAG("--stall.rank", stall.rank, integer, "stall: that rank sleeps in one step's training_step"),
    ARC_PROBE_FLAG("--stall.step", stall.step, integer, "stall: at that global step"),
    ARC_PROBE_FLAG("--stall.ms", stall.ms, integer, "stall: for that long"),
    ARC_PROBE_FLAG("--slow.rank", slow.rank, integer, "slow: that rank sleeps in every training_step"),
    ARC_PROBE_FLAG("--slow.ms", slow.ms, integer, "slow: for that long"),
    ARC_PROBE_FLAG("--small-disk.bytes", small_disk_bytes, integer,
                   "rank 0 may write files of that many bytes at most (RLIMIT_FSIZE), so that its saves fail"),
    // Stopping.
    ARC_PROBE_FLAG("--stop.rank", stop.rank, integer, "stop: that rank alone calls request_stop"),
    ARC_PROBE_FLAG("--stop.step", stop.step, integer, "stop: at that global step"),
    ARC_PROBE_FLAG("--early-stop.rank", early_stop_rank, integer,
                   "each rank logs val_flag without sync_dist, 0 on that rank and 1 elsewhere, and EarlyStopping "
                   "stops below 0.5, so that only that rank wants to stop"),
    ARC_PROBE_FLAG("--late.rank", late.rank, integer, "late: that rank starts fit later (its max_time clock behind)"),
    ARC_PROBE_FLAG("--late.ms", late.ms, integer, "late: by that long"),
    ARC_PROBE_FLAG("--slow-fit-start.rank", slow_fit_start.rank, integer,
                   "slow-fit-start: a callback ahead of the ModelCheckpoint sleeps in that rank's on_fit_start"),
    ARC_PROBE_FLAG("--slow-fit-start.ms", slow_fit_start.ms, integer, "slow-fit-start: for that long"),
    // Checkpoints.
    ARC_PROBE_FLAG("--checkpoints.every", checkpoints.every, integer,
                   "checkpoints: a ModelCheckpoint in ROOT/checkpoints every that many steps"),
    ARC_PROBE_FLAG("--checkpoints.seconds", checkpoints.seconds, number,
                   "checkpoints: the same every that many seconds (train_time_interval)"),
    ARC_PROBE_FLAG("--checkpoints.monitor", checkpoints.monitor, text,
                   "checkpoints: keep the one file of the least value of that metric"),
    ARC_PROBE_FLAG("--checkpoints.save-last", checkpoints.save_last, flag, "checkpoints: write last.ckpt"),
    // Validation.
    ARC_PROBE_FLAG("--val.every", val.every, integer, "val: validate every that many batches"),
    ARC_PROBE_FLAG("--val.every-seconds", val.every_seconds, number,
                   "val: rank 0's time-based val_check_interval (the others' is an hour, so that they validate only "
                   "when the vote says so); every rank prints \"VALIDATED <rank> <step>\""),
    ARC_PROBE_FLAG("--val.stream", val.stream, integer,
                   "val: validation on a stream of the first N samples, logging val_loss (sync_dist, per epoch)"),
    ARC_PROBE_FLAG("--val.step-sync", val.step_sync, flag, "val: val_loss per step too"),
    // Data.
    ARC_PROBE_FLAG("--stream", stream, integer,
                   "the training data is a stream (IterableDataset) of the first N samples"),
    ARC_PROBE_FLAG("--combined", combined, integer,
                   "a CombinedLoader of the samples (\"a\") and of the last N (\"b\", half batches, cycled); the loss "
                   "is the sum of both parts'"),
    ARC_PROBE_FLAG("--user-shard", user_shard.on, flag,
                   "use_distributed_sampler(false), and the sampler gives each rank its share itself (rank, rank + "
                   "world, ...)"),
    ARC_PROBE_FLAG("--user-shard.uneven-drop", user_shard.uneven_drop, integer,
                   "user-shard: rank 1's share loses its last N samples"),
    ARC_PROBE_FLAG("--prepare-log", prepare_log, text,
                   "the data comes from a DataModule whose prepare_data appends a line to FILE"),
    ARC_PROBE_FLAG("--skip.rank", skip.rank, integer, "skip: that rank's training_step returns no loss once"),
    ARC_PROBE_FLAG("--skip.batch", skip.batch, integer, "skip: at that batch of the first epoch"),
    // The model and its steps.
    ARC_PROBE_FLAG("--batchnorm", batchnorm, flag, "an arc::SyncBatchNorm after fc1"),
    ARC_PROBE_FLAG("--spare", spare, flag, "a layer the loss never uses"),
    ARC_PROBE_FLAG("--gather", gather, integer,
                   "the loss is over every rank's outputs and targets, gathered with all_gather (the outputs with "
                   "sync_grads); 2: rank 1 gathers one row less"),
    ARC_PROBE_FLAG("--toggle", toggle, flag,
                   "manual optimization with an optimizer for fc1 and one for fc2, each step in turn toggled"),
    ARC_PROBE_FLAG("--finetune", finetune, integer,
                   "a BackboneFinetuning with fc1 as the backbone, unfrozen at epoch E"),
    ARC_PROBE_FLAG("--freeze.rank", freeze.rank, integer, "freeze: that rank alone freezes fc1's weight in setup"),
    ARC_PROBE_FLAG("--freeze.bias-elsewhere", freeze.bias_elsewhere, flag,
                   "freeze: the other ranks freeze fc1's bias (as many tensors, not the same)"),
    ARC_PROBE_FLAG("--spike.rank", spike.rank, integer,
                   "spike: a SpikeDetection callback, and that rank's loss is 1000 times larger once"),
    ARC_PROBE_FLAG("--spike.batch", spike.batch, integer, "spike: at that batch of the first epoch"),
    ARC_PROBE_FLAG("--plateau", plateau, text,
                   "a ReduceLROnPlateau (patience 0, mode min) steps every optimizer step on that metric"),
    // Logging (every step logs rank_mean, rank_max, rank_min and rank_sum with sync_dist).
    ARC_PROBE_FLAG("--log.rank-named", log.rank_named, flag,
                   "log: each rank logs rank_<its rank> with sync_dist (the custom loop: loss_rank<r> in "
                   "all_reduce_dict)"),
    ARC_PROBE_FLAG("--log.rank-value", log.rank_value, flag,
                   "log: rank_value without sync_dist: the global step on rank 0, its negation elsewhere"),
    ARC_PROBE_FLAG("--log.from-hooks", log.from_hooks, flag,
                   "log: hook_rank in on_before_optimizer_step; a callback ahead of --watch's logs end_rank, "
                   "dict_rank and dict_twice_rank at batch end and val_end_rank per validation step"),
    ARC_PROBE_FLAG("--watch", watch.metric, text,
                   "every rank prints \"WATCH <rank> <value>\" of that callback metric at each batch end, "
                   "\"BACKWARD ...\" before backward, \"VALIDATION ...\" at each validation batch end"),
    ARC_PROBE_FLAG("--watch.count-syncs", watch.count_syncs, flag,
                   "watch: also \"SYNCS <rank> <step-value syncs so far>\" (the simple profiler's count; needs "
                   "--root)"),
    // Arclight's Fabric instead of the Trainer.
    ARC_PROBE_FLAG("--loop", loop, text, "trainer (default) or custom: the same training written on arc::Fabric"),
    ARC_PROBE_FLAG("--custom.save-at", custom.save_at, integer, "custom: save the loop's state after that step"),
    ARC_PROBE_FLAG("--custom.state", custom.state, text, "custom: to that file"),
    ARC_PROBE_FLAG("--custom.resume", custom.resume, text, "custom: resume from that file"),
};

#undef ARC_PROBE_FLAG

void print_help() {
  std::cout << "ddp_probe [--<flag> <value> ...]:\n";
  for (const auto& known : kFlags) std::cout << "  " << std::left << std::setw(26) << known.name << known.help << "\n";
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    const std::string key = argv[i];
    const auto known = std::find_if(kFlags.begin(), kFlags.end(), [&](const Flag& f) { return key == f.name; });
    ARC_CHECK(known != kFlags.end(), "ddp_probe: unknown flag '", key, "' (ddp_probe --help lists them)");
    ARC_CHECK(i + 1 < argc, "ddp_probe: ", key, " needs a value");
    known->set(a, argv[i + 1]);
  }
  // ddp_spawn's rank 0 is the process started, which has no RANK; the ranks it starts have theirs.
  const char* rank = std::getenv("RANK");
  if (a.root_per_rank) a.root += "/rank" + std::string(rank != nullptr ? rank : "0");
  return a;
}

// Bytes of the optimizer state `optimizer` holds (SGD's momentum, Adam's and AdamW's moments).
int64_t state_bytes(torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  const auto add = [&](const torch::Tensor& t) { bytes += t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; };
  for (const auto& entry : optimizer.state()) {
    if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(entry.second.get())) {
      add(sgd->momentum_buffer());
    } else if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(entry.second.get())) {
      add(adam->exp_avg()), add(adam->exp_avg_sq()), add(adam->max_exp_avg_sq());
    } else if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(entry.second.get())) {
      add(adamw->exp_avg()), add(adamw->exp_avg_sq()), add(adamw->max_exp_avg_sq());
    }
  }
  return bytes;
}

class Probe : public arc::TrainModule {
 public:
  explicit Probe(const Args& args) : args_(args) {
    if (!args.build_late) build();
    if (args.toggle) set_automatic_optimization(false);
  }
  // --build-late: the layers are made here, where FULL_SHARD shards each unit as it is made.
  void configure_model() override {
    if (!args_.build_late || !fc1.is_empty()) return;
    build();
    std::cout << "BUILT " << trainer().global_rank() << " " << resident_bytes() << std::endl;
  }
  // The bytes of parameter memory this rank holds now.
  int64_t resident_bytes() const {
    int64_t bytes = 0;
    for (const auto& p : parameters()) bytes += static_cast<int64_t>(p.storage().nbytes());
    return bytes;
  }
  void setup(arc::Stage) override {
    if (args_.freeze.rank < 0) return;
    if (trainer().global_rank() == args_.freeze.rank) {
      fc1->module().weight.set_requires_grad(false);
    } else if (args_.freeze.bias_elsewhere) {
      fc1->module().bias.set_requires_grad(false);
    }
  }
  torch::Tensor training_step(arc::Batch& batch, int64_t batch_idx) override {
    if (!started_ && trainer().is_global_zero())
      std::cout << "TIMING start " << global_step() << " " << unix_ms() << " " << attempt() << std::endl;
    started_ = true;
    if (args_.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(args_.step_ms));
    if (trainer().global_rank() == args_.stall.rank && global_step() == args_.stall.step)
      std::this_thread::sleep_for(std::chrono::milliseconds(args_.stall.ms));
    if (trainer().global_rank() == args_.slow.rank)
      std::this_thread::sleep_for(std::chrono::milliseconds(args_.slow.ms));
    maybe_fail();
    if (trainer().global_rank() == args_.stop.rank && global_step() == args_.stop.step)
      trainer().request_stop("probe: rank " + std::to_string(args_.stop.rank) + " alone asks to stop");
    const arc::Batch& rows = batch.has_part("a") ? batch.part("a") : batch;
    if (args_.toggle) return toggled_steps(rows);
    auto hidden = fc1(rows[0]);
    if (!bn.is_empty()) hidden = bn(hidden);
    auto logits = fc2(torch::relu(hidden));
    auto targets = rows[1];
    if (args_.gather > 0) {
      const int64_t drop = args_.gather == 2 && trainer().global_rank() == 1 ? 1 : 0;
      logits = all_gather(logits.narrow(0, 0, logits.size(0) - drop), true).flatten(0, 1);
      targets = all_gather(targets).flatten(0, 1);
    }
    auto loss = torch::nn::functional::cross_entropy(logits, targets);
    if (batch.has_part("b"))
      loss = loss + torch::nn::functional::cross_entropy(fc2(torch::relu(fc1(batch.part("b")[0]))), batch.part("b")[1]);
    const auto rank = static_cast<double>(trainer().global_rank());
    log("rank_mean", rank, arc::LogOptions().on_epoch(true).sync_dist(true));
    log("rank_max", rank, arc::LogOptions().on_epoch(true).reduce(arc::Reduce::max).sync_dist(true));
    log("rank_min", rank, arc::LogOptions().on_epoch(true).reduce(arc::Reduce::min).sync_dist(true));
    log("rank_sum", rank, arc::LogOptions().on_step(false).on_epoch(true).reduce(arc::Reduce::sum).sync_dist(true));
    if (args_.log.rank_named)
      log("rank_" + std::to_string(trainer().global_rank()), rank, arc::LogOptions().on_epoch(true).sync_dist(true));
    if (args_.log.rank_value) {
      const auto step = static_cast<double>(global_step());
      log("rank_value", trainer().is_global_zero() ? step : -step);
    }
    const bool skip = trainer().global_rank() == args_.skip.rank && batch_idx == args_.skip.batch;
    const bool spike = trainer().global_rank() == args_.spike.rank && batch_idx == args_.spike.batch;
    if (spike && current_epoch() == 0) loss = loss + 999 * loss.detach();
    return skip && current_epoch() == 0 ? torch::Tensor() : loss;
  }
  void on_before_optimizer_step(torch::optim::Optimizer&) override {
    if (args_.log.from_hooks)
      log("hook_rank", static_cast<double>(trainer().global_rank()), arc::LogOptions().sync_dist(true));
  }
  void on_validation_start() override {
    if (args_.val.every_seconds > 0)
      std::cout << "VALIDATED " << trainer().global_rank() << " " << global_step() << std::endl;
  }
  void validation_step(arc::Batch& batch, int64_t) override {
    log("val_flag", trainer().global_rank() == args_.early_stop_rank ? 0.0 : 1.0, arc::LogOptions().on_epoch(true));
    if (args_.val.stream > 0)
      log("val_loss", torch::nn::functional::cross_entropy(fc2(torch::relu(fc1(batch[0]))), batch[1]),
          arc::LogOptions().on_step(args_.val.step_sync).on_epoch(true).sync_dist(true));
  }
  std::vector<arc::OptimizerConfig> configure_optimizers() override {
    const auto sgd = [this](std::vector<torch::Tensor> parameters) -> std::shared_ptr<torch::optim::Optimizer> {
      if (args_.optimizer == "adam") return std::make_shared<torch::optim::Adam>(parameters, 0.01);
      if (args_.optimizer == "adamw")
        return std::make_shared<torch::optim::AdamW>(parameters, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
      if (args_.optimizer == "lbfgs") return std::make_shared<torch::optim::LBFGS>(parameters);
      ARC_CHECK(args_.optimizer == "sgd", "--optimizer takes sgd, adam, adamw or lbfgs, not ", args_.optimizer);
      return std::make_shared<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.1).momentum(0.9));
    };
    if (args_.toggle) return {sgd(fc1->parameters()), sgd(fc2->parameters())};
    auto optimizer = sgd(arc::BaseFinetuning::filter_params(*this));
    if (args_.plateau.empty()) return {optimizer};
    plateau = std::make_shared<arc::ReduceLROnPlateau>(*optimizer, arc::ReduceLROnPlateau::Mode::min, 0.5, 0);
    return {{optimizer, {plateau, arc::Interval::step, 1, args_.plateau}}};
  }
  arc::ShardedUnit<torch::nn::Linear> fc1{nullptr}, fc2{nullptr};
  std::shared_ptr<arc::LRScheduler> plateau;
  arc::SyncBatchNorm bn{nullptr};
  std::string held = "0 0 0";

 private:
  void build() {
    torch::manual_seed(0);
    // Units of FULL_SHARD; under any other strategy the Linear layers themselves.
    fc1 = register_module("fc1", arc::ShardedUnit<torch::nn::Linear>(torch::nn::Linear(8, 16)));
    fc2 = register_module("fc2", arc::ShardedUnit<torch::nn::Linear>(torch::nn::Linear(16, 3)));
    if (args_.batchnorm) bn = register_module("bn", arc::SyncBatchNorm(16));
    if (args_.spare) register_module("spare", torch::nn::Linear(3, 3));
  }
  void maybe_fail() {
    const int64_t node = trainer().global_rank() / trainer().strategy().local_world_size();
    const bool on_failing_node = args_.fail.node >= 0 && node == args_.fail.node;
    if ((trainer().global_rank() != args_.fail.rank && !on_failing_node) || global_step() != args_.fail.step) return;
    if (args_.fail.attempt != -1 && attempt() != args_.fail.attempt) return;
    fail_on_purpose(args_.fail.kind, global_step());
  }
  // Each optimizer in turn, the other one's parameters frozen meanwhile (toggle_optimizer).
  torch::Tensor toggled_steps(const arc::Batch& rows) {
    torch::Tensor loss;
    for (auto& optimizer : optimizers()) {
      toggle_optimizer(optimizer.optimizer());
      loss = torch::nn::functional::cross_entropy(fc2(torch::relu(fc1(rows[0]))), rows[1]);
      optimizer.zero_grad();
      manual_backward(loss);
      optimizer.step();
      untoggle_optimizer(optimizer.optimizer());
    }
    return loss.detach();
  }
  // What the rank holds at the end of training (before the strategy's teardown makes a FULL_SHARD
  // module whole again): "<gradient bytes> <optimizer state bytes> <parameter bytes>".
  void on_train_end() override {
    int64_t grad_bytes = 0, optimizer_bytes = 0, parameter_bytes = 0;
    for (const auto& p : parameters()) {
      if (p.grad().defined()) grad_bytes += static_cast<int64_t>(p.grad().nbytes());
      parameter_bytes += static_cast<int64_t>(p.storage().nbytes());
    }
    for (const auto& config : trainer().optimizer_configs()) optimizer_bytes += state_bytes(*config.optimizer);
    held = std::to_string(grad_bytes) + " " + std::to_string(optimizer_bytes) + " " + std::to_string(parameter_bytes);
  }
  // Which start of the job this is: the launcher's restart count (torchrun's or SLURM's).
  int64_t attempt() const { return trainer().strategy().restart_count(); }

  Args args_;
  bool started_ = false;
};

// The probe's data through a DataModule that notes every prepare_data call.
class NotingData : public arc::DataModule {
 public:
  NotingData(arc::DataSource train, arc::DataSource val, std::string log)
      : train_(std::move(train)), val_(std::move(val)), log_(std::move(log)) {}
  void prepare_data() override { std::ofstream(log_, std::ios::app) << "prepared\n"; }
  arc::DataSource train_dataloader() override { return train_; }
  arc::DataSource val_dataloader() override { return val_; }

 private:
  arc::DataSource train_, val_;
  std::string log_;
};

void write_parameters(torch::nn::Module& module, const std::string& path) {
  if (path.empty()) return;
  std::ofstream out(path, std::ios::binary);
  auto state = module.parameters();
  for (const auto& buffer : module.buffers())
    if (buffer.is_floating_point()) state.push_back(buffer);
  for (const auto& p : state) {
    const auto values = p.detach().to(torch::kCPU, torch::kFloat).contiguous();
    out.write(reinterpret_cast<const char*>(values.data_ptr<float>()), values.numel() * 4);
  }
}

std::vector<std::shared_ptr<arc::Logger>> make_loggers(const Args& args) {
  if (args.loggers.empty()) return {};
  return {std::make_shared<arc::CSVLogger>(args.loggers), std::make_shared<arc::TensorBoardLogger>(args.loggers)};
}

// The same training written by hand on arc::Fabric (with --loggers, each step's loss logged).
void custom_loop(const Args& args, const arc::TrainerOptions& options, const arc::DataSource& data) {
  arc::Fabric fabric(options.fabric_options().loggers(make_loggers(args)));
  fabric.log_hyperparams({{"batch", args.batch}});
  Probe module(args);
  fabric.prepare(module);
  torch::optim::SGD sgd(module.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  fabric.prepare(sgd);
  auto loader = fabric.prepare(data);
  int64_t step = 0, epoch = 0, first_batch = 0;
  arc::FabricState state;
  state.add("model", module).add("optimizer", sgd);
  if (!args.custom.resume.empty()) {
    fabric.load(args.custom.resume, state);
    step = state.values.at("step");
    epoch = state.values.at("epoch");
    first_batch = state.values.at("batch");
  }
  torch::Tensor loss;
  for (; step < args.steps; ++epoch) {
    loader->set_epoch(epoch);
    loader->start(first_batch);
    first_batch = 0;
    while (step < args.steps) {
      auto batch = loader->next();
      if (!batch) break;
      if (fabric.global_rank() == args.fail.rank && step == args.fail.step) fail_on_purpose(args.fail.kind, step);
      const auto local = fabric.prepare_batch(*batch);
      sgd.zero_grad();
      {
        const auto autocast = fabric.autocast();
        loss = torch::nn::functional::cross_entropy(module.fc2(torch::relu(module.fc1(local[0]))), local[1]);
      }
      fabric.backward(loss);
      fabric.step(sgd);
      if (!args.loggers.empty()) fabric.log("train_loss", loss.item<double>(), step);
      if (args.log.rank_named)
        fabric.all_reduce_dict({{"loss_rank" + std::to_string(fabric.global_rank()), loss.detach()}});
      ++step;
      if (step == args.custom.save_at) {
        state.values = {{"step", step}, {"epoch", epoch}, {"batch", loader->position()}};
        fabric.save(args.custom.state, state);
      }
    }
  }
  const auto averaged = fabric.all_reduce_dict({{"loss", loss.detach()}});
  const auto rank = torch::tensor(static_cast<double>(fabric.global_rank()));
  const auto summed = fabric.all_reduce_dict({{"rank", rank}}, arc::Reduce::sum);
  const auto highest = fabric.all_reduce_dict({{"rank", rank}}, arc::Reduce::max);
  const auto ranks = fabric.distribute([](int64_t rank) { return nlohmann::json{{"rank", rank}}; });
  // In place: a buffer from reduce_buffer (each rank's value its rank + 1; rank 0, which reports,
  // made its file), and a strided tensor made in inference mode (as an evaluation step makes them).
  auto buffer = fabric.reduce_buffer({3, 1000}, torch::kDouble);
  const auto* buffer_data = buffer.data_ptr();
  buffer.fill_(static_cast<double>(fabric.global_rank() + 1));
  fabric.all_reduce_(buffer, arc::Reduce::sum);
  torch::Tensor strided;
  {
    const c10::InferenceMode evaluation;
    strided = torch::full({6, 4}, static_cast<double>(fabric.global_rank())).t();
  }
  fabric.all_reduce_(strided, arc::Reduce::max);
  if (fabric.is_global_zero()) {
    nlohmann::json report = {{"global_step", step},
                             {"world_size", fabric.world_size()},
                             {"loss", averaged.at("loss").item<double>()},
                             {"rank_sum", summed.at("rank").item<double>()},
                             {"rank_max", highest.at("rank").item<double>()},
                             {"ranks", ranks},
                             {"buffer_sizes", buffer.sizes().vec()},
                             {"buffer_min", buffer.min().item<double>()},
                             {"buffer_max", buffer.max().item<double>()},
                             {"buffer_stayed", buffer.data_ptr() == buffer_data},
                             {"buffer_shared", arc::testing::in_shm_mapping(buffer_data)},
                             {"strided_sum", strided.sum().item<double>()},
                             {"strided_strides", strided.strides().vec()}};
    std::cout << "PROBE " << report.dump() << std::endl;
  }
  fabric.strategy().with_whole_parameters([&] {
    if (fabric.is_global_zero()) write_parameters(module, args.out);
  });
}

// The probe's data: 512 samples of 8 features and 3 classes.
struct Samples {
  static constexpr int64_t kCount = 512;
  torch::Tensor x = torch::linspace(-1, 1, kCount * 8).reshape({kCount, 8}).sin();
  torch::Tensor y = (x.sum(1) * 3).abs().to(torch::kLong).remainder(3);
  std::shared_ptr<arc::TensorDataset> all = std::make_shared<arc::TensorDataset>(std::vector<torch::Tensor>{x, y});

  // The first n samples as a stream.
  arc::DataSource stream(int64_t n, int64_t batch) const {
    const std::vector<torch::Tensor> rows{x.slice(0, 0, n), y.slice(0, 0, n)};
    return {std::make_shared<arc::testing::RowStreamDataset>(rows), arc::DataLoaderOptions(batch)};
  }
};

// The run's settings as the Trainer's options.
arc::TrainerOptions trainer_options(const Args& args) {
  arc::TrainerOptions options;
  std::vector<int64_t> listed;
  for (std::stringstream parts(args.device_list); parts.good();) {
    std::string part;
    if (std::getline(parts, part, ',') && !part.empty()) listed.push_back(std::stoll(part));
  }
  options.strategy(args.strategy).max_steps(args.steps).accelerator(args.accelerator);
  options.devices(listed.empty() ? arc::Devices::of_count(args.devices) : arc::Devices::of_indices(listed));
  options.ddp(arc::DDPStrategyOptions()
                  .process_group_backend(args.process_group_backend)
                  .timeout(args.timeout)
                  .collective_timeout(args.collective_timeout)
                  .shared_memory(args.shared_memory)
                  .static_graph(args.static_graph)
                  .find_unused_parameters(args.find_unused)
                  .sharding_strategy(args.sharding)
                  .state_dict_type(args.state_dict_type)
                  .forward_prefetch(args.forward_prefetch)
                  .backward_prefetch(args.backward_prefetch));
  if (args.bucket_mb > 0) options.ddp().first_bucket_mb(args.bucket_mb).bucket_cap_mb(args.bucket_mb);
  if (args.clip > 0) options.gradient_clip_val(args.clip).gradient_clip_algorithm(args.clip_algorithm);
  options.accumulate_grad_batches(args.accumulate).num_threads(1);
  if (args.log_every > 0) options.log_every_n_steps(args.log_every);
  options.num_nodes(args.num_nodes);
  options.sync_batchnorm(args.sync_batchnorm)
      .default_root_dir(args.root.empty() ? "." : args.root)
      .precision(args.precision);
  // Without --root nothing is logged: no folder is left where the test runs.
  if (args.root.empty()) options.logger(false);
  if (args.watch.count_syncs) {
    ARC_CHECK(!args.root.empty(), "--watch.count-syncs needs --root, the folder of the profiler's report");
    options.profiler("simple");
  }
  if (args.max_time > 0) options.max_time(args.max_time);
  options.elastic_checkpoint_every_n_steps(args.elastic_every).async_checkpointing(args.async_checkpoint);
  options.enable_progress_bar(false).enable_model_summary(false).enable_checkpointing(false).deterministic(true);
  return options;
}

// The validation data of the scenarios that validate (none for the others).
arc::DataSource validation_data(const Args& args, const Samples& samples, arc::TrainerOptions& options) {
  arc::DataSource val;
  // Two batches per run for the stop scenarios, so that the ranks validate before they agree to stop.
  if (args.early_stop_rank >= 0 || args.stop.rank >= 0 || args.max_time > 0) {
    val = {samples.all, arc::DataLoaderOptions(args.batch)};
    options.limit_val_batches(arc::BatchAmount::count(2)).num_sanity_val_steps(0);
  }
  if (args.val.every > 0) options.val_check_interval(arc::BatchAmount::count(args.val.every));
  if (args.val.every_seconds > 0) {
    val = {samples.all, arc::DataLoaderOptions(args.batch)};
    options.limit_val_batches(arc::BatchAmount::count(2)).num_sanity_val_steps(0);
    const char* rank = std::getenv("RANK");  // set in spawned and launched ranks
    const bool rank_zero = rank == nullptr || std::string(rank) == "0";
    options.val_check_interval(arc::BatchAmount::duration(rank_zero ? args.val.every_seconds : 3600));
  }
  if (args.val.stream > 0) {
    val = samples.stream(args.val.stream, args.batch);
    options.num_sanity_val_steps(0);
  }
  return val;
}

// The training data: the samples, or a stream, a combined loader, or each rank's share chosen by
// the user's sampler.
arc::DataSource training_data(const Args& args, const Samples& samples, arc::TrainerOptions& options) {
  arc::DataSource train{samples.all, arc::DataLoaderOptions(args.batch)};
  if (args.stream > 0) train = samples.stream(args.stream, args.batch);
  if (args.combined > 0) {
    const int64_t from = Samples::kCount - args.combined;
    auto last = std::make_shared<arc::TensorDataset>(
        std::vector<torch::Tensor>{samples.x.slice(0, from), samples.y.slice(0, from)});
    train = arc::CombinedLoader({{"a", train}, {"b", {last, arc::DataLoaderOptions(args.batch / 2)}}});
  }
  if (args.user_shard.on) {
    options.use_distributed_sampler(false);
    const char* rank = std::getenv("RANK");
    const int64_t own = rank == nullptr ? 0 : std::stoll(rank), world = args.devices;
    const int64_t drop = own == 1 ? args.user_shard.uneven_drop : 0;
    train.sampler = std::make_shared<arc::FunctionSampler>([own, world, drop](int64_t size, int64_t) {
      std::vector<int64_t> order;
      for (int64_t i = own; i < size; i += world) order.push_back(i);
      order.resize(order.size() - static_cast<size_t>(drop));
      return order;
    });
    options.even_batches(args.even_batches);
  }
  return train;
}

// --log.from-hooks: a callback that logs with sync_dist from on_train_batch_end and
// on_validation_batch_end.
std::shared_ptr<arc::Callback> logging_from_hooks() {
  auto batch_end = std::make_shared<arc::LambdaCallback>();
  batch_end->train_batch_end = [](arc::Trainer& trainer, arc::TrainModule& module, const torch::Tensor&, arc::Batch&,
                                  int64_t) {
    const auto rank = static_cast<double>(trainer.global_rank());
    module.log("end_rank", rank, arc::LogOptions().sync_dist(true));
    module.log_dict({{"dict_rank", torch::tensor(rank)}, {"dict_twice_rank", torch::tensor(2 * rank)}},
                    arc::LogOptions().sync_dist(true));
  };
  batch_end->validation_batch_end = [](arc::Trainer& trainer, arc::TrainModule& module, arc::Batch&, int64_t) {
    module.log("val_end_rank", static_cast<double>(trainer.global_rank()),
               arc::LogOptions().on_step(true).on_epoch(false).sync_dist(true));
  };
  return batch_end;
}

// --watch: a callback that prints "<tag> <rank> <value>" of the watched metric, once it is there.
std::shared_ptr<arc::Callback> watching(const std::string& metric) {
  const auto print = [metric](const arc::Trainer& trainer, const char* tag) {
    const auto& metrics = trainer.callback_metrics();
    if (metrics.count(metric))
      std::cout << tag << " " << trainer.global_rank() << " " << metrics.at(metric) << std::endl;
  };
  auto watch = std::make_shared<arc::LambdaCallback>();
  watch->train_batch_end = [print](arc::Trainer& trainer, arc::TrainModule&, const torch::Tensor&, arc::Batch&,
                                   int64_t) {
    print(trainer, "WATCH");
    // The step-value syncs so far, each one collective (the simple profiler counts them).
    if (const auto* profiler = dynamic_cast<const arc::SimpleProfiler*>(trainer.profiler())) {
      const auto found = profiler->totals().find("[LoggerConnector].sync_step_values");
      std::cout << "SYNCS " << trainer.global_rank() << " "
                << (found == profiler->totals().end() ? 0 : found->second.calls) << std::endl;
    }
  };
  watch->validation_batch_end = [print](arc::Trainer& trainer, arc::TrainModule&, arc::Batch&, int64_t) {
    print(trainer, "VALIDATION");
  };
  // Between training_step and on_train_batch_end.
  watch->before_backward = [print](arc::Trainer& trainer, arc::TrainModule&, const torch::Tensor&) {
    print(trainer, "BACKWARD");
  };
  return watch;
}

// The scenarios' callbacks, in the order they run; `checkpoints` gets the ModelCheckpoint, if any.
std::vector<std::shared_ptr<arc::Callback>> scenario_callbacks(const Args& args,
                                                               std::shared_ptr<arc::ModelCheckpoint>& checkpoints) {
  std::vector<std::shared_ptr<arc::Callback>> callbacks;
  if (args.spike.rank >= 0) callbacks.push_back(std::make_shared<arc::SpikeDetection>());
  if (args.early_stop_rank >= 0)
    callbacks.push_back(std::make_shared<arc::EarlyStopping>(
        arc::EarlyStoppingOptions("val_flag").stopping_threshold(0.5).check_finite(false)));
  if (args.finetune >= 0)
    callbacks.push_back(std::make_shared<arc::BackboneFinetuning>(
        arc::BackboneFinetuningOptions().backbone("fc1").unfreeze_backbone_at_epoch(args.finetune)));
  if (args.slow_fit_start.rank >= 0) {
    auto late = std::make_shared<arc::LambdaCallback>();
    late->fit_start = [rank = args.slow_fit_start.rank, ms = args.slow_fit_start.ms](arc::Trainer& trainer,
                                                                                     arc::TrainModule&) {
      if (trainer.global_rank() == rank) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    };
    callbacks.push_back(late);
  }
  if (args.log.from_hooks) callbacks.push_back(logging_from_hooks());
  if (!args.watch.metric.empty()) callbacks.push_back(watching(args.watch.metric));
  if (args.checkpoints.every > 0 || args.checkpoints.seconds > 0) {
    ARC_CHECK(!args.root.empty(), "--checkpoints.every and --checkpoints.seconds need --root, the folder of their ",
              "checkpoints");
    checkpoints = std::make_shared<arc::ModelCheckpoint>(arc::ModelCheckpointOptions()
                                                             .dirpath(args.root + "/checkpoints")
                                                             .every_n_train_steps(args.checkpoints.every)
                                                             .train_time_interval(args.checkpoints.seconds)
                                                             .monitor(args.checkpoints.monitor)
                                                             .save_last(args.checkpoints.save_last));
    callbacks.push_back(checkpoints);
  }
  return callbacks;
}

// --small-disk.bytes: this process may write files of that many bytes at most.
void limit_file_size(int64_t bytes) {
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit limit{};
  getrlimit(RLIMIT_FSIZE, &limit);
  limit.rlim_cur = static_cast<rlim_t>(bytes);
  setrlimit(RLIMIT_FSIZE, &limit);
}

// What every rank saw, after fit (the reports listed at the top).
void report(const Args& args, arc::Trainer& trainer, Probe& module, const arc::ModelCheckpoint* checkpoints) {
  std::cout << "STOPPED " << trainer.global_rank() << " " << trainer.global_step() << std::endl;
  std::cout << "RESIDENT " << trainer.global_rank() << " " << module.resident_bytes() << std::endl;
  std::cout << "HELD " << trainer.global_rank() << " " << module.held << std::endl;
  std::cout << "VALIDATIONS " << trainer.global_rank() << " " << trainer.progress().validation_runs << std::endl;
  if (checkpoints != nullptr)
    std::cout << "BEST " << trainer.global_rank() << " " << checkpoints->best_model_path() << " "
              << (checkpoints->best_model_score() ? std::to_string(*checkpoints->best_model_score()) : "none")
              << std::endl;
  if (module.plateau)
    std::cout << "LR " << trainer.global_rank() << " " << std::setprecision(17) << module.plateau->last_lr().at(0)
              << std::endl;
  // Units sharded as they were made stay sharded after fit: every rank gathers them for the files.
  trainer.strategy().with_whole_parameters([&] {
    if (args.out_every_rank) write_parameters(module, args.out + "." + std::to_string(trainer.global_rank()));
    if (trainer.is_global_zero()) write_parameters(module, args.out);
  });
  if (trainer.is_global_zero()) {
    nlohmann::json probe = trainer.callback_metrics();
    probe["global_step"] = trainer.global_step();
    probe["world_size"] = trainer.world_size();
    std::cout << "PROBE " << probe.dump() << std::endl;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--help") {
    print_help();
    return 0;
  }
  Args parsed;
  try {
    parsed = parse(argc, argv);
  } catch (const arc::Error& error) {
    std::cerr << error.what() << std::endl;
    return 2;
  }
  const Args& args = parsed;
  const Samples samples;
  Probe module(args);
  arc::TrainerOptions options;
  try {
    options = trainer_options(args);
    if (args.loop == "custom") {
      custom_loop(args, options, {samples.all, arc::DataLoaderOptions(args.batch)});
      return 0;
    }
    const auto val = validation_data(args, samples, options);
    const auto train = training_data(args, samples, options);
    std::shared_ptr<arc::ModelCheckpoint> checkpoints;
    arc::Trainer trainer(options, scenario_callbacks(args, checkpoints), make_loggers(args));
    if (args.small_disk_bytes > 0 && trainer.is_global_zero()) limit_file_size(args.small_disk_bytes);
    if (trainer.global_rank() == args.late.rank) std::this_thread::sleep_for(std::chrono::milliseconds(args.late.ms));
    if (args.prepare_log.empty()) {
      trainer.fit(module, train, val, args.ckpt_path);
    } else {
      NotingData noting({samples.all, arc::DataLoaderOptions(args.batch)}, val, args.prepare_log);
      trainer.fit(module, noting);
    }
    report(args, trainer, module, checkpoints.get());
    if (args.validate_after) {
      trainer.validate(module, arc::DataSource{samples.all, arc::DataLoaderOptions(args.batch)}, "", false);
      std::cout << "VALIDATED " << trainer.global_rank() << " " << module.resident_bytes() << std::endl;
    }
  } catch (const std::exception& error) {
    std::cerr << "probe: error: " << error.what() << std::endl;
    if (args.fit_again) {
      try {
        arc::Trainer again(options);
        again.fit(module, arc::DataSource{samples.all, arc::DataLoaderOptions(args.batch)});
      } catch (const std::exception& again_error) {
        std::cerr << "probe: fit again: " << again_error.what() << std::endl;
      }
    }
    return 1;
  }
  return 0;
}
