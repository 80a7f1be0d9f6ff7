// A training program for the distributed tests: trains a small MLP under the strategy asked
// for, can fail on purpose at a given rank and step, and reports what it saw.
//   ddp_probe --strategy ddp_spawn --devices 2 --batch 16 --steps 30 [--accumulate 2]
//             [--out params.bin] [--fail exception|exit3|segv|sigkill|sigint --fail-rank 1 --fail-step 5]
//             [--timeout 20] [--shared-memory 0] [--tag anything] [--precision bf16-mixed]
//             [--accelerator gpu] [--device-list 0,0] [--process-group-backend gloo]
//             [--root DIR] [--elastic-every 5] [--fail-attempt 0] [--step-ms 20]
//             [--stop-rank 1 --stop-step 5] [--early-stop-rank 1] [--max-time 2 --late-rank 1 --late-ms 1000]
//             [--val-every 4]
//             [--loggers DIR] [--prepare-log FILE] [--checkpoint-every 5 --fsize-limit 1024 --async-checkpoint 1]
//             [--skip-rank 1 --skip-batch 3] [--batchnorm 1 [--sync-batchnorm 1]]
//             [--spare 1 [--static-graph 1] [--find-unused 1]] [--val-every-seconds 0.2] [--user-shard 1]
//             [--stream 97] [--val-stream 97 [--val-step-sync 1]] [--uneven-drop 32 [--even-batches pad]]
//             [--collective-timeout 1] [--stall-rank 1 --stall-step 3 --stall-ms 20000]
//             [--root-per-rank 1] [--save-last 1] [--ckpt-path last]
//             [--slow-rank 1 --slow-ms 20] [--log-every 5] [--num-nodes 2] [--out-every-rank 1] [--fail-node 1]
//             [--fit-again 1] [--combined 96] [--gather 1] [--finetune 1] [--toggle 1]
//             [--freeze-rank 1 [--freeze-bias-elsewhere 1]] [--spike-rank 1 --spike-batch 5]
//             [--rank-named-sync 1] [--rank-value 1] [--checkpoint-monitor rank_value]
//             [--checkpoint-seconds 0.5] [--plateau rank_value] [--fit-start-rank 1 --fit-start-ms 1000]
//             [--watch rank_mean_step] [--hook-sync 1]
// --fail-attempt: fail only in that start of the job (the strategy's restart count).
// --stop-rank/--stop-step: that rank alone calls request_stop at that step. --early-stop-rank: each
// rank validates and logs `val_flag` without sync_dist, 0 on that rank and 1 elsewhere, and
// EarlyStopping stops below 0.5, so that only that rank wants to stop. --late-rank: that rank
// starts fit --late-ms later, so that its max_time clock runs behind the others'. These three
// validate 2 batches at each epoch's end, or every --val-every batches.
// --prepare-log: the data comes from a DataModule whose prepare_data appends a line to FILE.
// --checkpoint-every: a ModelCheckpoint in ROOT/checkpoints every that many steps. --fsize-limit: rank 0
// may write files of that many bytes at most (RLIMIT_FSIZE, SIGXFSZ ignored), so that its saves fail.
// --async-checkpoint: TrainerOptions::async_checkpointing. --save-last: that ModelCheckpoint writes
// last.ckpt. --root-per-rank: each rank's ROOT is ROOT/rank<r>, as if each had a disk of its own.
// --ckpt-path: fit's ckpt_path.
// --skip-rank/--skip-batch: that rank's training_step returns no loss for that batch of the first epoch.
// --batchnorm: an arc::SyncBatchNorm after fc1; --sync-batchnorm: TrainerOptions::sync_batchnorm.
// --val-every-seconds: rank 0's time-based val_check_interval (the others' is an hour, so that they
// validate only when the vote says so); every rank prints "VALIDATED <rank> <step>".
// --user-shard: use_distributed_sampler(false), and the training data's sampler gives each rank its
// share itself (samples rank, rank + world, ...), as a user who shards the data does.
// --uneven-drop N (with --user-shard): rank 1's share loses its last N samples; --even-batches: the
// option for the ranks' different batch counts.
// --stall-rank/--stall-step/--stall-ms: that rank sleeps in that step's training_step.
// --slow-rank/--slow-ms: that rank sleeps in every training_step. --log-every: log_every_n_steps.
// --num-nodes: TrainerOptions::num_nodes. --out-every-rank: every rank writes its weights to OUT.<rank>.
// --fail-node: every rank of that node (rank / local world size) fails as --fail-rank would.
// --fit-again 1: after fit failed, fit once more with a new Trainer and print that error
// ("probe: fit again: ...").
// --stream N: the training data is a stream (an IterableDataset) of the first N samples.
// --combined N: the training data is a CombinedLoader of the samples ("a", batches of --batch) and of
// the last N samples ("b", batches of half as many, started over as often as needed); the loss is
// the sum of both parts' losses.
// --gather 1: the loss is over every rank's outputs and targets, gathered with all_gather (the
// outputs with sync_grads), as a contrastive loss is; --gather 2: rank 1 gathers one row less.
// --finetune E: a BackboneFinetuning with fc1 as the backbone, unfrozen at epoch E.
// --toggle 1: manual optimization with an optimizer for fc1 and one for fc2, each step in turn
// toggled (GAN-style), without find_unused_parameters.
// --freeze-rank R: that rank alone freezes fc1's weight in setup (--freeze-bias-elsewhere 1: the
// other ranks freeze fc1's bias, as many tensors but not the same).
// --val-stream N: validation on a stream of the first N samples, logging `val_loss` (sync_dist, per
// epoch; --val-step-sync: per step too).
// --spike-rank R/--spike-batch B: a SpikeDetection callback, and that rank's loss is 1000 times larger
// at that batch of the first epoch (its gradient as it was).
// --rank-value 1: each training step logs `rank_value` without sync_dist: the global step on rank 0,
// its negation elsewhere. --checkpoint-monitor: the --checkpoint-every ModelCheckpoint keeps the one
// file of the least value of that metric. --checkpoint-seconds: a ModelCheckpoint in ROOT/checkpoints
// (the same) saves every that many seconds (train_time_interval). --plateau: a ReduceLROnPlateau
// (patience 0, mode min) steps every optimizer step on that metric, and every rank prints "LR <rank>
// <its rate>" after fit. --fit-start-rank: a callback ahead
// of the ModelCheckpoint sleeps --fit-start-ms in that rank's on_fit_start.
// --watch NAME: every rank prints "WATCH <rank> <value>" of that callback metric at each
// on_train_batch_end, "BACKWARD ..." at each on_before_backward and "VALIDATION ..." at each
// on_validation_batch_end, where the metric is there (the probe logs rank_mean, rank_max and rank_min
// with sync_dist at each step).
// --hook-sync 1: on_before_optimizer_step logs `hook_rank`, the rank, with sync_dist, and a callback
// ahead of --watch's logs `end_rank` so in on_train_batch_end (and, in one log_dict, `dict_rank` and
// `dict_twice_rank`, the rank and twice it) and `val_end_rank` (per step) in
// on_validation_batch_end. --count-syncs 1 (with --root, for the simple profiler's report): --watch's
// callback also prints "SYNCS <rank> <step-value syncs so far>" at every batch end.
// With a ModelCheckpoint every rank prints "BEST <rank> <best_model_path> <best score, or none>" after fit.
// --spare: a layer the loss never uses; --static-graph, --find-unused: the DDP options that allow it.
// --loggers: a CSVLogger and a TensorBoardLogger in DIR, built in main on every rank.
// Every rank prints "STOPPED <rank> <global step>" and "VALIDATIONS <rank> <fit's validations>" after fit.
// Rank 0 prints "TIMING start <step> <unix ms> <attempt>" at its first step and the failing rank
// "TIMING kill <step> <unix ms>" before it kills itself, for the launcher tests and benchmarks.
#include "support/command.h"
#include "support/row_stream.h"
#include "support/shm_maps.h"

#include <arc/arc.h>

#include <torch/torch.h>

#include <sys/resource.h>
#include <unistd.h>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

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

struct Args {
  std::string strategy = "ddp_spawn";
  int64_t devices = 2, batch = 16, steps = 30, accumulate = 1, fail_rank = -1, fail_step = -1, fail_attempt = -1;
  int64_t elastic_every = 0, step_ms = 0, stop_rank = -1, stop_step = -1, early_stop_rank = -1, late_rank = -1;
  int64_t late_ms = 0, checkpoint_every = 0, fsize_limit = 0, skip_rank = -1, skip_batch = -1, stream = 0;
  int64_t val_stream = 0, uneven_drop = 0, stall_rank = -1, stall_step = -1, stall_ms = 0;
  int64_t spike_rank = -1, spike_batch = -1, val_every = 0;
  int64_t slow_rank = -1, slow_ms = 0, log_every = 0, num_nodes = 1, fail_node = -1, combined = 0, gather = 0;
  int64_t finetune = -1, freeze_rank = -1, save_at = -1, fit_start_rank = -1, fit_start_ms = 0;
  double timeout = 30, max_time = 0, val_every_seconds = 0, collective_timeout = 300, checkpoint_seconds = 0;
  bool shared_memory = true, batchnorm = false, sync_batchnorm = false, spare = false, static_graph = false;
  bool find_unused = false, user_shard = false, val_step_sync = false, out_every_rank = false, async_checkpoint = false;
  bool fit_again = false, toggle = false, rank_named_sync = false, freeze_bias_elsewhere = false, root_per_rank = false,
       save_last = false, rank_value = false, hook_sync = false, count_syncs = false;
  std::string ckpt_path, checkpoint_monitor, plateau, watch;
  std::string out, fail, loop = "trainer", root, precision = "32-true", loggers, prepare_log;
  std::string even_batches = "error";
  // The custom loop's state: saved after step save_at to `state` (Fabric::save), or loaded from
  // `resume` before it starts.
  std::string state, resume;
  // The CPU unless asked: "auto" would take a GPU wherever one is, and the tests count CPU ranks.
  std::string accelerator = "cpu", device_list, process_group_backend = "auto";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--strategy") a.strategy = value;
    if (key == "--devices") a.devices = std::stoll(value);
    if (key == "--batch") a.batch = std::stoll(value);
    if (key == "--steps") a.steps = std::stoll(value);
    if (key == "--accumulate") a.accumulate = std::stoll(value);
    if (key == "--out") a.out = value;
    if (key == "--fail") a.fail = value;
    if (key == "--fail-rank") a.fail_rank = std::stoll(value);
    if (key == "--fail-step") a.fail_step = std::stoll(value);
    if (key == "--timeout") a.timeout = std::stod(value);
    if (key == "--loop") a.loop = value;
    if (key == "--save-at") a.save_at = std::stoll(value);
    if (key == "--state") a.state = value;
    if (key == "--resume") a.resume = value;
    if (key == "--shared-memory") a.shared_memory = value == "1";
    if (key == "--root") a.root = value;
    if (key == "--elastic-every") a.elastic_every = std::stoll(value);
    if (key == "--fail-attempt") a.fail_attempt = std::stoll(value);
    if (key == "--step-ms") a.step_ms = std::stoll(value);
    if (key == "--precision") a.precision = value;
    if (key == "--accelerator") a.accelerator = value;
    if (key == "--device-list") a.device_list = value;
    if (key == "--process-group-backend") a.process_group_backend = value;
    if (key == "--stop-rank") a.stop_rank = std::stoll(value);
    if (key == "--stop-step") a.stop_step = std::stoll(value);
    if (key == "--early-stop-rank") a.early_stop_rank = std::stoll(value);
    if (key == "--val-every") a.val_every = std::stoll(value);
    if (key == "--max-time") a.max_time = std::stod(value);
    if (key == "--late-rank") a.late_rank = std::stoll(value);
    if (key == "--late-ms") a.late_ms = std::stoll(value);
    if (key == "--loggers") a.loggers = value;
    if (key == "--prepare-log") a.prepare_log = value;
    if (key == "--checkpoint-every") a.checkpoint_every = std::stoll(value);
    if (key == "--fsize-limit") a.fsize_limit = std::stoll(value);
    if (key == "--async-checkpoint") a.async_checkpoint = value == "1";
    if (key == "--skip-rank") a.skip_rank = std::stoll(value);
    if (key == "--skip-batch") a.skip_batch = std::stoll(value);
    if (key == "--batchnorm") a.batchnorm = value == "1";
    if (key == "--sync-batchnorm") a.sync_batchnorm = value == "1";
    if (key == "--spare") a.spare = value == "1";
    if (key == "--static-graph") a.static_graph = value == "1";
    if (key == "--find-unused") a.find_unused = value == "1";
    if (key == "--val-every-seconds") a.val_every_seconds = std::stod(value);
    if (key == "--user-shard") a.user_shard = value == "1";
    if (key == "--stream") a.stream = std::stoll(value);
    if (key == "--combined") a.combined = std::stoll(value);
    if (key == "--gather") a.gather = std::stoll(value);
    if (key == "--finetune") a.finetune = std::stoll(value);
    if (key == "--freeze-rank") a.freeze_rank = std::stoll(value);
    if (key == "--toggle") a.toggle = value == "1";
    if (key == "--root-per-rank") a.root_per_rank = value == "1";
    if (key == "--save-last") a.save_last = value == "1";
    if (key == "--ckpt-path") a.ckpt_path = value;
    if (key == "--freeze-bias-elsewhere") a.freeze_bias_elsewhere = value == "1";
    if (key == "--val-stream") a.val_stream = std::stoll(value);
    if (key == "--uneven-drop") a.uneven_drop = std::stoll(value);
    if (key == "--collective-timeout") a.collective_timeout = std::stod(value);
    if (key == "--stall-rank") a.stall_rank = std::stoll(value);
    if (key == "--stall-step") a.stall_step = std::stoll(value);
    if (key == "--stall-ms") a.stall_ms = std::stoll(value);
    if (key == "--slow-rank") a.slow_rank = std::stoll(value);
    if (key == "--slow-ms") a.slow_ms = std::stoll(value);
    if (key == "--log-every") a.log_every = std::stoll(value);
    if (key == "--num-nodes") a.num_nodes = std::stoll(value);
    if (key == "--fail-node") a.fail_node = std::stoll(value);
    if (key == "--spike-rank") a.spike_rank = std::stoll(value);
    if (key == "--spike-batch") a.spike_batch = std::stoll(value);
    if (key == "--fit-again") a.fit_again = value == "1";
    if (key == "--out-every-rank") a.out_every_rank = value == "1";
    if (key == "--even-batches") a.even_batches = value;
    if (key == "--val-step-sync") a.val_step_sync = value == "1";
    if (key == "--rank-named-sync") a.rank_named_sync = value == "1";
    if (key == "--rank-value") a.rank_value = value == "1";
    if (key == "--checkpoint-monitor") a.checkpoint_monitor = value;
    if (key == "--checkpoint-seconds") a.checkpoint_seconds = std::stod(value);
    if (key == "--plateau") a.plateau = value;
    if (key == "--watch") a.watch = value;
    if (key == "--hook-sync") a.hook_sync = value == "1";
    if (key == "--count-syncs") a.count_syncs = value == "1";
    if (key == "--fit-start-rank") a.fit_start_rank = std::stoll(value);
    if (key == "--fit-start-ms") a.fit_start_ms = std::stoll(value);
  }
  // ddp_spawn's rank 0 is the process started, which has no RANK; the ranks it starts have theirs.
  const char* rank = std::getenv("RANK");
  if (a.root_per_rank) a.root += "/rank" + std::string(rank != nullptr ? rank : "0");
  return a;
}

class Probe : public arc::TrainModule {
 public:
  explicit Probe(const Args& args) : args_(args) {
    torch::manual_seed(0);
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 3));
    if (args.batchnorm) bn = register_module("bn", arc::SyncBatchNorm(16));
    if (args.spare) register_module("spare", torch::nn::Linear(3, 3));
    if (args.toggle) set_automatic_optimization(false);
  }
  void setup(arc::Stage) override {
    if (args_.freeze_rank < 0) return;
    if (trainer().global_rank() == args_.freeze_rank) {
      fc1->weight.set_requires_grad(false);
    } else if (args_.freeze_bias_elsewhere) {
      fc1->bias.set_requires_grad(false);
    }
  }
  torch::Tensor training_step(arc::Batch& batch, int64_t batch_idx) override {
    if (!started_ && trainer().is_global_zero())
      std::cout << "TIMING start " << global_step() << " " << unix_ms() << " " << attempt() << std::endl;
    started_ = true;
    if (args_.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(args_.step_ms));
    if (trainer().global_rank() == args_.stall_rank && global_step() == args_.stall_step)
      std::this_thread::sleep_for(std::chrono::milliseconds(args_.stall_ms));
    if (trainer().global_rank() == args_.slow_rank)
      std::this_thread::sleep_for(std::chrono::milliseconds(args_.slow_ms));
    maybe_fail();
    if (trainer().global_rank() == args_.stop_rank && global_step() == args_.stop_step)
      trainer().request_stop("probe: rank " + std::to_string(args_.stop_rank) + " alone asks to stop");
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
    if (args_.rank_named_sync)
      log("rank_" + std::to_string(trainer().global_rank()), rank, arc::LogOptions().on_epoch(true).sync_dist(true));
    if (args_.rank_value) {
      const auto step = static_cast<double>(global_step());
      log("rank_value", trainer().is_global_zero() ? step : -step);
    }
    const bool skip = trainer().global_rank() == args_.skip_rank && batch_idx == args_.skip_batch;
    const bool spike = trainer().global_rank() == args_.spike_rank && batch_idx == args_.spike_batch;
    if (spike && current_epoch() == 0) loss = loss + 999 * loss.detach();
    return skip && current_epoch() == 0 ? torch::Tensor() : loss;
  }
  void on_before_optimizer_step(torch::optim::Optimizer&) override {
    if (args_.hook_sync)
      log("hook_rank", static_cast<double>(trainer().global_rank()), arc::LogOptions().sync_dist(true));
  }
  void on_validation_start() override {
    if (args_.val_every_seconds > 0)
      std::cout << "VALIDATED " << trainer().global_rank() << " " << global_step() << std::endl;
  }
  void validation_step(arc::Batch& batch, int64_t) override {
    log("val_flag", trainer().global_rank() == args_.early_stop_rank ? 0.0 : 1.0, arc::LogOptions().on_epoch(true));
    if (args_.val_stream > 0)
      log("val_loss", torch::nn::functional::cross_entropy(fc2(torch::relu(fc1(batch[0]))), batch[1]),
          arc::LogOptions().on_step(args_.val_step_sync).on_epoch(true).sync_dist(true));
  }
  std::vector<arc::OptimizerConfig> configure_optimizers() override {
    const auto sgd = [](std::vector<torch::Tensor> parameters) {
      return std::make_shared<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.1).momentum(0.9));
    };
    if (args_.toggle) return {sgd(fc1->parameters()), sgd(fc2->parameters())};
    auto optimizer = sgd(arc::BaseFinetuning::filter_params(*this));
    if (args_.plateau.empty()) return {optimizer};
    plateau = std::make_shared<arc::ReduceLROnPlateau>(*optimizer, arc::ReduceLROnPlateau::Mode::min, 0.5, 0);
    return {{optimizer, {plateau, arc::Interval::step, 1, args_.plateau}}};
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  std::shared_ptr<arc::LRScheduler> plateau;
  arc::SyncBatchNorm bn{nullptr};

 private:
  void maybe_fail() {
    const int64_t node = trainer().global_rank() / trainer().strategy().local_world_size();
    const bool on_failing_node = args_.fail_node >= 0 && node == args_.fail_node;
    if ((trainer().global_rank() != args_.fail_rank && !on_failing_node) || global_step() != args_.fail_step) return;
    if (args_.fail_attempt != -1 && attempt() != args_.fail_attempt) return;
    fail_on_purpose(args_.fail, global_step());
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
  if (!args.resume.empty()) {
    fabric.load(args.resume, state);
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
      if (fabric.global_rank() == args.fail_rank && step == args.fail_step) fail_on_purpose(args.fail, step);
      const auto local = fabric.prepare_batch(*batch);
      sgd.zero_grad();
      {
        const auto autocast = fabric.autocast();
        loss = torch::nn::functional::cross_entropy(module.fc2(torch::relu(module.fc1(local[0]))), local[1]);
      }
      fabric.backward(loss);
      fabric.step(sgd);
      if (!args.loggers.empty()) fabric.log("train_loss", loss.item<double>(), step);
      if (args.rank_named_sync)
        fabric.all_reduce_dict({{"loss_rank" + std::to_string(fabric.global_rank()), loss.detach()}});
      ++step;
      if (step == args.save_at) {
        state.values = {{"step", step}, {"epoch", epoch}, {"batch", loader->position()}};
        fabric.save(args.state, state);
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
    write_parameters(module, args.out);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  const int64_t samples = 512;
  auto x = torch::linspace(-1, 1, samples * 8).reshape({samples, 8}).sin();
  auto y = (x.sum(1) * 3).abs().to(torch::kLong).remainder(3);
  auto data = std::make_shared<arc::TensorDataset>(std::vector<torch::Tensor>{x, y});
  Probe module(args);
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
                  .find_unused_parameters(args.find_unused));
  options.accumulate_grad_batches(args.accumulate).num_threads(1);
  if (args.log_every > 0) options.log_every_n_steps(args.log_every);
  options.num_nodes(args.num_nodes);
  options.sync_batchnorm(args.sync_batchnorm)
      .default_root_dir(args.root.empty() ? "." : args.root)
      .precision(args.precision);
  // Without --root nothing is logged: no folder is left where the test runs.
  if (args.root.empty()) options.logger(false);
  if (args.count_syncs) {
    ARC_CHECK(!args.root.empty(), "--count-syncs needs --root, the folder of the profiler's report");
    options.profiler("simple");
  }
  options.elastic_checkpoint_every_n_steps(args.elastic_every).async_checkpointing(args.async_checkpoint);
  options.enable_progress_bar(false).enable_model_summary(false).enable_checkpointing(false).deterministic(true);
  try {
    if (args.loop == "custom") {
      custom_loop(args, options, {data, arc::DataLoaderOptions(args.batch)});
      return 0;
    }
    std::vector<std::shared_ptr<arc::Callback>> callbacks;
    if (args.spike_rank >= 0) callbacks.push_back(std::make_shared<arc::SpikeDetection>());
    arc::DataSource val;
    if (args.early_stop_rank >= 0)
      callbacks.push_back(std::make_shared<arc::EarlyStopping>(
          arc::EarlyStoppingOptions("val_flag").stopping_threshold(0.5).check_finite(false)));
    if (args.early_stop_rank >= 0 || args.stop_rank >= 0 || args.max_time > 0) {
      val = {data, arc::DataLoaderOptions(args.batch)};
      options.limit_val_batches(arc::BatchAmount::count(2)).num_sanity_val_steps(0);
    }
    if (args.val_every > 0) options.val_check_interval(arc::BatchAmount::count(args.val_every));
    if (args.val_every_seconds > 0) {
      val = {data, arc::DataLoaderOptions(args.batch)};
      options.limit_val_batches(arc::BatchAmount::count(2)).num_sanity_val_steps(0);
      const char* rank = std::getenv("RANK");  // set in spawned and launched ranks
      const bool rank_zero = rank == nullptr || std::string(rank) == "0";
      options.val_check_interval(arc::BatchAmount::duration(rank_zero ? args.val_every_seconds : 3600));
    }
    if (args.max_time > 0) options.max_time(args.max_time);
    arc::DataSource train{data, arc::DataLoaderOptions(args.batch)};
    // The first n samples as a stream.
    const auto stream = [&](int64_t n) -> arc::DataSource {
      const std::vector<torch::Tensor> rows{x.slice(0, 0, n), y.slice(0, 0, n)};
      return {std::make_shared<arc::testing::RowStreamDataset>(rows), arc::DataLoaderOptions(args.batch)};
    };
    if (args.stream > 0) train = stream(args.stream);
    if (args.combined > 0) {
      auto last = std::make_shared<arc::TensorDataset>(
          std::vector<torch::Tensor>{x.slice(0, samples - args.combined), y.slice(0, samples - args.combined)});
      train = arc::CombinedLoader({{"a", train}, {"b", {last, arc::DataLoaderOptions(args.batch / 2)}}});
    }
    if (args.val_stream > 0) {
      val = stream(args.val_stream);
      options.num_sanity_val_steps(0);
    }
    if (args.user_shard) {
      options.use_distributed_sampler(false);
      const char* rank = std::getenv("RANK");
      const int64_t own = rank == nullptr ? 0 : std::stoll(rank), world = args.devices;
      const int64_t drop = own == 1 ? args.uneven_drop : 0;
      train.sampler = std::make_shared<arc::FunctionSampler>([own, world, drop](int64_t size, int64_t) {
        std::vector<int64_t> order;
        for (int64_t i = own; i < size; i += world) order.push_back(i);
        order.resize(order.size() - static_cast<size_t>(drop));
        return order;
      });
      options.even_batches(args.even_batches);
    }
    if (args.finetune >= 0)
      callbacks.push_back(std::make_shared<arc::BackboneFinetuning>(
          arc::BackboneFinetuningOptions().backbone("fc1").unfreeze_backbone_at_epoch(args.finetune)));
    if (args.fit_start_rank >= 0) {
      auto late = std::make_shared<arc::LambdaCallback>();
      late->fit_start = [&args](arc::Trainer& trainer, arc::TrainModule&) {
        if (trainer.global_rank() == args.fit_start_rank)
          std::this_thread::sleep_for(std::chrono::milliseconds(args.fit_start_ms));
      };
      callbacks.push_back(late);
    }
    if (args.hook_sync) {
      auto batch_end = std::make_shared<arc::LambdaCallback>();
      batch_end->train_batch_end = [](arc::Trainer& trainer, arc::TrainModule& module, const torch::Tensor&,
                                      arc::Batch&, int64_t) {
        const auto rank = static_cast<double>(trainer.global_rank());
        module.log("end_rank", rank, arc::LogOptions().sync_dist(true));
        module.log_dict({{"dict_rank", torch::tensor(rank)}, {"dict_twice_rank", torch::tensor(2 * rank)}},
                        arc::LogOptions().sync_dist(true));
      };
      batch_end->validation_batch_end = [](arc::Trainer& trainer, arc::TrainModule& module, arc::Batch&, int64_t) {
        module.log("val_end_rank", static_cast<double>(trainer.global_rank()),
                   arc::LogOptions().on_step(true).on_epoch(false).sync_dist(true));
      };
      callbacks.push_back(batch_end);
    }
    if (!args.watch.empty()) {
      // "<tag> <rank> <value>" of the watched metric, once it is there.
      const auto print = [&args](const arc::Trainer& trainer, const char* tag) {
        const auto& metrics = trainer.callback_metrics();
        if (metrics.count(args.watch))
          std::cout << tag << " " << trainer.global_rank() << " " << metrics.at(args.watch) << std::endl;
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
      callbacks.push_back(watch);
    }
    std::shared_ptr<arc::ModelCheckpoint> checkpoints;
    if (args.checkpoint_every > 0 || args.checkpoint_seconds > 0) {
      ARC_CHECK(!args.root.empty(), "--checkpoint-every and --checkpoint-seconds need --root, the folder of their ",
                "checkpoints");
      checkpoints = std::make_shared<arc::ModelCheckpoint>(arc::ModelCheckpointOptions()
                                                               .dirpath(args.root + "/checkpoints")
                                                               .every_n_train_steps(args.checkpoint_every)
                                                               .train_time_interval(args.checkpoint_seconds)
                                                               .monitor(args.checkpoint_monitor)
                                                               .save_last(args.save_last));
      callbacks.push_back(checkpoints);
    }
    arc::Trainer trainer(options, callbacks, make_loggers(args));
    if (args.fsize_limit > 0 && trainer.is_global_zero()) {
      std::signal(SIGXFSZ, SIG_IGN);
      rlimit limit{};
      getrlimit(RLIMIT_FSIZE, &limit);
      limit.rlim_cur = static_cast<rlim_t>(args.fsize_limit);
      setrlimit(RLIMIT_FSIZE, &limit);
    }
    if (trainer.global_rank() == args.late_rank) std::this_thread::sleep_for(std::chrono::milliseconds(args.late_ms));
    if (args.prepare_log.empty()) {
      trainer.fit(module, train, val, args.ckpt_path);
    } else {
      NotingData noting({data, arc::DataLoaderOptions(args.batch)}, val, args.prepare_log);
      trainer.fit(module, noting);
    }
    std::cout << "STOPPED " << trainer.global_rank() << " " << trainer.global_step() << std::endl;
    std::cout << "VALIDATIONS " << trainer.global_rank() << " " << trainer.progress().validation_runs << std::endl;
    if (checkpoints)
      std::cout << "BEST " << trainer.global_rank() << " " << checkpoints->best_model_path() << " "
                << (checkpoints->best_model_score() ? std::to_string(*checkpoints->best_model_score()) : "none")
                << std::endl;
    if (module.plateau)
      std::cout << "LR " << trainer.global_rank() << " " << std::setprecision(17) << module.plateau->last_lr().at(0)
                << std::endl;
    if (args.out_every_rank) write_parameters(module, args.out + "." + std::to_string(trainer.global_rank()));
    if (trainer.is_global_zero()) {
      nlohmann::json report = trainer.callback_metrics();
      report["global_step"] = trainer.global_step();
      report["world_size"] = trainer.world_size();
      std::cout << "PROBE " << report.dump() << std::endl;
      write_parameters(module, args.out);
    }
  } catch (const std::exception& error) {
    std::cerr << "probe: error: " << error.what() << std::endl;
    if (args.fit_again) {
      try {
        arc::Trainer again(options);
        again.fit(module, arc::DataSource{data, arc::DataLoaderOptions(args.batch)});
      } catch (const std::exception& again_error) {
        std::cerr << "probe: fit again: " << again_error.what() << std::endl;
      }
    }
    return 1;
  }
  return 0;
}
