// Trainer: option resolution, stage set-up and tear-down, and the glue between module,
// callbacks, loggers and metric stores. The loops live in fit_loop.cpp and evaluation_loop.cpp.
#include <arc/core/trainer.h>

#include <arc/accelerators/accelerator_backend.h>
#include <arc/base/console.h>
#include <arc/base/detail/swapped.h>
#include <arc/core/detail/callback_connector.h>
#include <arc/core/detail/checkpoint_connector.h>
#include <arc/core/detail/data_connector.h>
#include <arc/core/detail/evaluation_loop.h>
#include <arc/core/detail/fit_loop.h>
#include <arc/core/detail/results_table.h>
#include <arc/core/detail/run_state.h>
#include <arc/core/detail/signal_connector.h>
#include <arc/data/data_loader.h>
#include <arc/fabric/checkpoint.h>
#include <arc/fabric/detail/connector.h>
#include <arc/loggers/csv_logger.h>
#include <arc/loggers/tensorboard_logger.h>
#include <arc/strategies/detail/rank_processes.h>
#include <arc/strategies/strategy.h>
#include <arc/strategies/sync_batch_norm.h>

#include <fmt/format.h>
#include <malloc.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/torch.h>
#include <cstdio>
#include <cstdlib>
#include <optional>

namespace arc {
namespace {

// fast_dev_run runs n batches of every stage once, as Lightning does.
TrainerOptions apply_fast_dev_run(TrainerOptions options) {
  const int64_t n = options.fast_dev_run();
  if (n == 0) return options;
  const auto batches = BatchAmount::count(n);
  options.limit_train_batches(batches).limit_val_batches(batches).limit_test_batches(batches);
  options.limit_predict_batches(batches).max_steps(n).max_epochs(1).num_sanity_val_steps(0);
  options.val_check_interval(BatchAmount::fraction(1.0)).check_val_every_n_epoch(1).enable_checkpointing(false);
  return options;
}

TrainerOptions apply_overfit_batches(TrainerOptions options) {
  if (options.overfit_batches().is_zero()) return options;
  options.limit_train_batches(options.overfit_batches()).limit_val_batches(options.overfit_batches());
  return options;
}

// glibc returns large freed blocks to the OS at once; a training step then page-faults its
// activation buffers back in every time. Keeping them in the heap removes those faults.
void keep_large_buffers_in_heap() {
  static const bool done = [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    return true;
  }();
  (void)done;
}

// Where what the module logs now goes.
MetricStore& logged_store(detail::RunState& state) {
  return state.training ? state.logging.train_metrics : state.logging.eval_metrics;
}

}  // namespace

Trainer::Trainer(TrainerOptions options, std::vector<std::shared_ptr<Callback>> callbacks,
                 std::vector<std::shared_ptr<Logger>> loggers, std::shared_ptr<Profiler> profiler)
    : options_(apply_overfit_batches(apply_fast_dev_run(std::move(options)))),
      callbacks_(std::move(callbacks)),
      loggers_(std::move(loggers)),
      profiler_(std::move(profiler)) {
  options_.validate();
  ARC_CHECK(!profiler_ || options_.profiler().name.empty(), "the Trainer got a Profiler and profiler=\"",
            options_.profiler().name, "\"; give one of them");
  if (!profiler_) profiler_ = make_profiler(options_.profiler());
  ARC_CHECK(!options_.barebones() || loggers_.empty(), "barebones=true, but the Trainer was given ", loggers_.size(),
            " logger(s); barebones mode turns logging off: drop the loggers or barebones");
  if (options_.fast_dev_run() > 0) loggers_.clear();
  if (options_.logger() && options_.fast_dev_run() == 0 && loggers_.empty())
    loggers_ = {std::make_shared<CSVLogger>(options_.default_root_dir()),
                std::make_shared<TensorBoardLogger>(options_.default_root_dir())};
  auto run = detail::resolve_run(options_.fabric_options());
  accelerator_ = std::move(run.accelerator);
  strategy_ = std::move(run.strategy);
  precision_ = std::move(run.precision);
  threads_per_process_ = run.threads_per_process;
  state_ = std::make_unique<detail::RunState>(loggers_, *strategy_);
  state_->cluster_environment = std::move(run.cluster_environment);
  state_->logging.agree_on_versions();
  detail::add_default_callbacks(callbacks_, options_, strategy_->elastic());
  if (options_.barebones())
    console().info(
        "barebones mode: no checkpoints, loggers, log() values, progress bar, model summary or sanity check; what is "
        "left is the Trainer's own overhead");
}

Trainer::~Trainer() = default;

Strategy& Trainer::strategy() const { return *strategy_; }
AcceleratorBackend& Trainer::accelerator() const { return *accelerator_; }
torch::Device Trainer::device() const { return strategy_->root_device(); }
int64_t Trainer::world_size() const { return strategy_->world_size(); }
int64_t Trainer::global_rank() const { return strategy_->global_rank(); }
bool Trainer::is_global_zero() const { return strategy_->is_global_zero(); }

std::string Trainer::log_dir() const {
  for (const auto& logger : loggers_)
    if (!logger->log_dir().empty()) return logger->log_dir();
  return options_.default_root_dir();
}

const Progress& Trainer::progress() const { return state_->progress; }
bool Trainer::should_stop() const { return state_->stop_after_validation > 0; }
const std::string& Trainer::stop_reason() const { return state_->stop_reason; }
bool Trainer::sanity_checking() const { return state_->sanity_checking; }
Stage Trainer::stage() const { return state_->stage; }
int64_t Trainer::num_training_batches() const { return state_->num_training_batches; }
int64_t Trainer::num_val_batches() const { return state_->num_val_batches; }
int64_t Trainer::dataloader_idx() const { return state_->dataloader_idx; }
DataLoader* Trainer::train_dataloader() const { return state_->train_loader; }
const std::vector<int64_t>& Trainer::batch_indices() const { return state_->batch_indices; }

int64_t Trainer::estimated_stepping_batches() const {
  ARC_CHECK(state_->estimated_stepping_batches.has_value(), "estimated_stepping_batches() is known once fit has ",
            "started; call it from configure_optimizers() or later");
  ARC_CHECK(*state_->estimated_stepping_batches != -1, "estimated_stepping_batches(): the fit's length is not known ",
            "(max_epochs=-1 and max_steps=-1, or training data that is a stream of unknown length); set max_steps ",
            "to schedule over it");
  return *state_->estimated_stepping_batches;
}
bool Trainer::logging_batch() const { return state_->logging_batch; }
int64_t Trainer::accumulate_grad_batches() const { return state_->accumulate_grad_batches; }
const std::vector<OptimizerConfig>& Trainer::optimizer_configs() const { return state_->optimizers; }

void Trainer::run_trial_fit(TrainModule& module, TrainerOptions options, std::shared_ptr<Callback> callback,
                            const DataSource& train) {
  ARC_CHECK(state_->fit_loop != nullptr && progress().global_step == 0, "run_trial_fit runs from a callback's ",
            "on_fit_start, before fit's first step; call it there");
  // The Trainer becomes the trial's (Lightning's tuners swap its callbacks, loggers and limits
  // likewise), with a run state of its own: the fit's progress, optimizers and metrics wait.
  const Swapped<TrainerOptions> options_swap(options_, std::move(options));
  std::vector<std::shared_ptr<Callback>> callbacks;
  if (callback) callbacks.push_back(std::move(callback));
  const Swapped<std::vector<std::shared_ptr<Callback>>> callbacks_swap(callbacks_, std::move(callbacks));
  const Swapped<std::vector<std::shared_ptr<Logger>>> loggers_swap(loggers_, {});
  const Swapped<std::shared_ptr<Profiler>> profiler_swap(profiler_, nullptr);
  auto trial_state = std::make_unique<detail::RunState>(loggers_, *strategy_);
  trial_state->cluster_environment = state_->cluster_environment;
  trial_state->stage = Stage::fit;
  trial_state->tuning = true;
  trial_state->stage_start = std::chrono::steady_clock::now();
  const Swapped<std::unique_ptr<detail::RunState>> state_swap(state_, std::move(trial_state));
  const DataConnector connector(options_, *strategy_, module, nullptr);
  FitData data{[&] { return connector.train(train); }, [] { return Loaders(); }};
  FitLoop(*this, *state_, module, std::move(data), "").run();
}

void Trainer::setup_optimizers(TrainModule& module) {
  ARC_CHECK(state_->fit_loop != nullptr, "setup_optimizers rebuilds a running fit's optimizers; call it from a ",
            "callback's on_fit_start");
  state_->optimizers = checked_optimizers(module);
}

void Trainer::set_train_batch_size(int64_t batch_size) {
  ARC_CHECK(state_->fit_loop != nullptr, "set_train_batch_size rebuilds a running fit's training loader; call it ",
            "from a callback's on_fit_start");
  ARC_CHECK(batch_size >= 1, "set_train_batch_size(", batch_size, "): a batch holds at least 1 sample");
  state_->train_batch_size = batch_size;
  state_->fit_loop->reload_train();
}
const Metrics& Trainer::callback_metrics() const { return state_->logging.callback_metrics(); }
const Metrics& Trainer::logged_metrics() const { return state_->logging.logged_metrics(); }
Metrics Trainer::progress_bar_metrics() const { return state_->logging.progress_bar_metrics(); }
void Trainer::log_to_loggers(const Metrics& metrics) { state_->logging.send(metrics, state_->progress); }

double Trainer::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - state_->stage_start).count();
}

double Trainer::agreed_elapsed_seconds() const { return world_size() > 1 ? state_->agreed_seconds : elapsed_seconds(); }

Metrics Trainer::agreed_metrics() {
  const auto& metrics = callback_metrics();
  if (world_size() == 1) return metrics;
  return metrics_from_json(nlohmann::json::parse(strategy().broadcast(metrics_to_json(metrics).dump(), 0)));
}

void Trainer::request_stop(const std::string& reason) {
  if (!should_stop())
    state_->stop_after_validation =
        state_->validation_running > 0 ? state_->validation_running : state_->progress.validation_runs + 1;
  state_->stop_reason = reason;
}

void Trainer::setup_environment() {
  torch::set_num_threads(static_cast<int>(threads_per_process_));
  if (options_.tune_malloc()) keep_large_buffers_in_heap();
  if (options_.seed()) torch::manual_seed(*options_.seed());
  auto& context = at::globalContext();
  // As Lightning does: cuBLAS is deterministic only with a fixed workspace, which it reads from the
  // environment when its handle is made; a value the user set is kept.
  if (options_.deterministic()) setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  context.setDeterministicAlgorithms(options_.deterministic().on, options_.deterministic().warn_only);
  context.setDeterministicCuDNN(options_.deterministic().on);
  if (options_.deterministic() && options_.benchmark().value_or(false))
    console().warn(
        "deterministic and benchmark are both on; cuDNN's benchmark mode picks algorithms by speed and "
        "may not be deterministic (turn benchmark off for bitwise reproducible runs)");
  if (options_.benchmark() || options_.deterministic()) context.setBenchmarkCuDNN(options_.benchmark().value_or(false));
}

void Trainer::attach(TrainModule& module) {
  ARC_CHECK(module_ == nullptr, "this Trainer is already running a module; run stages one after another");
  module_ = &module;
  last_module_ = &module;
  module.trainer_ = this;
}

void Trainer::detach() {
  if (module_ != nullptr) module_->trainer_ = nullptr;
  module_ = nullptr;
  state_->data_module = nullptr;
}

void Trainer::run_stage(Stage stage, TrainModule& module, DataModule* data, const std::function<void()>& body) {
  attach(module);
  try {
    detail::add_module_callbacks(callbacks_, module.configure_callbacks());
  } catch (...) {
    detach();
    throw;
  }
  state_->stage = stage;
  state_->data_module = data;
  state_->stage_start = std::chrono::steady_clock::now();
  state_->agreed_seconds = 0;
  if (profiler_) profiler_->setup(to_string(stage), log_dir(), global_rank());
  state_->stop_after_validation = 0;
  state_->validation_running = 0;
  state_->stop_reason.clear();
  state_->logging.train_metrics.clear();
  state_->logging.eval_metrics.clear();
  state_->logging.held_step.reset();
  try {
    setup_environment();
    if (strategy_->local_rank() == 0) {
      if (data != nullptr) data->prepare_data();
      module.prepare_data();
    }
    strategy_->barrier();
    if (data != nullptr) data->setup(stage);
    call_callbacks([&](Callback& c) { c.setup(*this, module, stage); });
    module.setup(stage);
    strategy_->build_model([&] { module.configure_model(); });
    // The precision's conversion makes new tensors of every parameter, which parameters sharded as
    // they were made cannot take: they must be made in its type.
    if (const auto dtype = precision_->input_dtype(); dtype && strategy_->parameters_sharded())
      for (const auto& parameter : module.named_parameters())
        ARC_CHECK(parameter.value().scalar_type() == *dtype, "the precision converts every parameter to ", *dtype,
                  ", but '", parameter.key(), "' is ", parameter.value().scalar_type(), " and belongs to an ",
                  "arc::ShardedUnit that FULL_SHARD sharded as configure_model made it; make the layers in ", *dtype,
                  " (torch::set_default_dtype before making them), or make them in the module's constructor");
    precision_->convert_module(module);
    strategy_->set_profiler(profiler_.get());
    strategy_->setup_module(module);
    connect_sync_batch_norms(module, strategy_->collectives(), options_.sync_batchnorm());
    std::optional<torch::autograd::DetectAnomalyGuard> anomalies;
    if (options_.detect_anomaly()) anomalies.emplace();
    body();
    anomalies.reset();
    strategy_->teardown();
    call_callbacks([&](Callback& c) { c.teardown(*this, module, stage); });
    module.teardown(stage);
    if (data != nullptr) data->teardown(stage);
    state_->logging.finalize("success");
    if (profiler_) profiler_->describe();
  } catch (const Interrupted& interrupted) {
    end_interrupted(module, interrupted);
  } catch (const std::exception& error) {
    strategy_->on_failure(message_of(error));
    call_callbacks([&](Callback& c) { c.on_exception(*this, module, error); });
    state_->logging.finalize("failed");
    detach();
    throw;
  }
  detach();
}

// Every rank got here at the same batch (the signal vote), so the ranks end together, as Lightning
// ends the process after a KeyboardInterrupt: the callbacks save, rank 0 says where, and every
// process exits with 130, the status of a command that SIGINT stopped.
void Trainer::end_interrupted(TrainModule& module, const Interrupted& interrupted) {
  call_callbacks([&](Callback& c) { c.on_exception(*this, module, interrupted); });
  state_->logging.finalize("failed");
  std::string saved;
  for (const auto& callback : callbacks_)
    if (!callback->exception_checkpoint().empty()) saved = callback->exception_checkpoint();
  try {
    strategy_->barrier();
    strategy_->on_interrupted();
  } catch (const std::exception& error) {
    console().error("the ranks could not end together after the interruption: {}", error.what());
  }
  if (is_global_zero()) {
    if (saved.empty())
      console().warn("{}; nothing was saved at this step (an OnExceptionCheckpoint callback saves it)",
                     interrupted.what());
    else
      console().warn("{}; saved '{}'; resume with fit(..., ckpt_path=\"{}\") (arc train ... --resume {})",
                     interrupted.what(), saved, saved, saved);
  }
  console().flush();
  std::fflush(nullptr);
  std::_Exit(kInterruptedExitCode);
}

void Trainer::fit(TrainModule& module, DataModule& data, const std::string& ckpt_path) {
  run_fit(module, &data, {}, {}, ckpt_path);
}

void Trainer::fit(TrainModule& module, DataSource train, DataSources val, const std::string& ckpt_path) {
  run_fit(module, nullptr, std::move(train), std::move(val), ckpt_path);
}

void Trainer::run_fit(TrainModule& module, DataModule* data, DataSource train, DataSources val,
                      const std::string& ckpt_path) {
  run_stage(Stage::fit, module, data, [&] {
    // The hooks are asked again when reload_dataloaders_every_n_epochs says; what fit was given stays.
    const DataConnector connector(options_, *strategy_, module, data);
    FitData fit_data{[&] { return connector.train(train, state_->train_batch_size); },
                     [&] { return connector.val(val, false); }};
    // What saves that a crash or SIGKILL interrupted left behind in this run's folders.
    if (is_global_zero())
      for (const auto& folder : {options_.default_root_dir(), log_dir() + "/checkpoints"})
        remove_stale_temporaries(folder);
    std::string resume = ckpt_path.empty() ? "" : CheckpointConnector(*this, *state_).resolve_resume(ckpt_path);
    // "last" is looked for on each rank's disk; every rank takes rank 0's, whether a file or none.
    if (ckpt_path == "last") resume = strategy_->broadcast(resume);
    // Rank 0 picks, so that every rank resumes from the same file.
    const auto automatic = strategy_->broadcast(
        is_global_zero() ? CheckpointConnector(*this, *state_).automatic_resume_path() : std::string());
    if (!automatic.empty()) {
      console().info("resuming from '{}' instead of {} (restart {} of this job)", automatic,
                     resume.empty() ? "starting afresh" : "'" + resume + "'", strategy_->restart_count());
      resume = automatic;
    }
    // Each fit's BatchSizeFinder chooses anew; a resumed one trains at the size of the run it continues,
    // known before its data is loaded and its optimizers count the batches.
    state_->train_batch_size = resume.empty() ? std::nullopt : CheckpointConnector::train_batch_size(resume);
    if (!resume.empty()) CheckpointConnector::restore_data_module(data, resume);
    FitLoop(*this, *state_, module, std::move(fit_data), resume).run();
  });
}

void Trainer::start_evaluation(TrainModule& module, const std::string& ckpt_path) {
  if (!ckpt_path.empty()) {
    CheckpointConnector checkpoints(*this, *state_);
    const std::string path = checkpoints.resolve(ckpt_path);
    checkpoints.restore_weights(module, path);
    CheckpointConnector::restore_data_module(state_->data_module, path);
    // As Lightning's "Loaded model weights from the checkpoint at ...": which file "best" or "last" was.
    console().info("loaded the weights of '{}'{}", path,
                   path == ckpt_path ? "" : fmt::format(" (ckpt_path=\"{}\")", ckpt_path));
  }
  state_->logging.log_hyperparams(module.hparams());
}

void Trainer::set_accumulate_grad_batches(int64_t batches) {
  ARC_CHECK(batches >= 1, "accumulate_grad_batches must be >= 1, got ", batches);
  state_->accumulate_grad_batches = batches;
}

void Trainer::set_max_epochs(int64_t epochs) {
  auto changed = options_;
  replace_options(changed.max_epochs(epochs), "set_max_epochs(" + std::to_string(epochs) + ")");
}

void Trainer::set_max_steps(int64_t steps) {
  auto changed = options_;
  replace_options(changed.max_steps(steps), "set_max_steps(" + std::to_string(steps) + ")");
}

void Trainer::replace_options(const TrainerOptions& changed, const std::string& call) {
  try {
    changed.validate();
  } catch (const Error& error) {
    throw Error(call + ": " + error.what());
  }
  options_ = changed;
}

void Trainer::save_checkpoint(const std::string& path, bool weights_only, std::optional<bool> in_background) {
  TrainModule* module = module_ != nullptr ? module_ : last_module_;
  ARC_CHECK(module != nullptr,
            "save_checkpoint needs a module: call it during or after fit, validate, test or predict");
  ARC_CHECK(!in_background.value_or(false) || state_->background_saves, "save_checkpoint('", path,
            "') in the background needs a running fit, whose batch boundaries report a failed write; save ",
            "synchronously here (in_background unset or false)");
  const bool background = state_->background_saves && in_background.value_or(options_.async_checkpointing());
  CheckpointConnector(*this, *state_).save(*module, path, weights_only, background);
}

void Trainer::after_checkpoint_writes(std::function<void()> action) {
  state_->checkpoint_writes.then(std::move(action));
}

Metrics Trainer::validate(TrainModule& module, DataModule& data, const std::string& ckpt_path, bool verbose) {
  return run_evaluation(Stage::validate, module, &data, {}, ckpt_path, verbose);
}

Metrics Trainer::validate(TrainModule& module, DataSources val, const std::string& ckpt_path, bool verbose) {
  return run_evaluation(Stage::validate, module, nullptr, std::move(val), ckpt_path, verbose);
}

Metrics Trainer::test(TrainModule& module, DataModule& data, const std::string& ckpt_path, bool verbose) {
  return run_evaluation(Stage::test, module, &data, {}, ckpt_path, verbose);
}

Metrics Trainer::test(TrainModule& module, DataSources test_data, const std::string& ckpt_path, bool verbose) {
  return run_evaluation(Stage::test, module, nullptr, std::move(test_data), ckpt_path, verbose);
}

Metrics Trainer::run_evaluation(Stage stage, TrainModule& module, DataModule* data, DataSources given,
                                const std::string& ckpt_path, bool verbose) {
  const bool testing = stage == Stage::test;
  Metrics out;
  run_stage(stage, module, data, [&] {
    start_evaluation(module, ckpt_path);
    const DataConnector connector(options_, *strategy_, module, data);
    auto loaders = testing ? connector.test(given) : connector.val(given, true);
    const auto& limit = testing ? options_.limit_test_batches() : options_.limit_val_batches();
    out = EvaluationLoop(*this, *state_, module, stage)
              .run(loaders, limited_batches(loaders, limit, testing ? "limit_test_batches" : "limit_val_batches"));
    if (verbose && is_global_zero()) detail::print_results(out, testing ? "test" : "validate", loaders.size());
  });
  return out;
}

std::vector<torch::Tensor> Trainer::predict(TrainModule& module, DataModule& data, const std::string& ckpt_path,
                                            bool return_predictions) {
  return run_predict(module, &data, {}, ckpt_path, return_predictions);
}

std::vector<torch::Tensor> Trainer::predict(TrainModule& module, DataSources predict_data, const std::string& ckpt_path,
                                            bool return_predictions) {
  return run_predict(module, nullptr, std::move(predict_data), ckpt_path, return_predictions);
}

std::vector<torch::Tensor> Trainer::run_predict(TrainModule& module, DataModule* data, DataSources given,
                                                const std::string& ckpt_path, bool return_predictions) {
  std::vector<torch::Tensor> out;
  run_stage(Stage::predict, module, data, [&] {
    start_evaluation(module, ckpt_path);
    auto loaders = DataConnector(options_, *strategy_, module, data).predict(given);
    out = EvaluationLoop(*this, *state_, module, Stage::predict)
              .predict(loaders, limited_batches(loaders, options_.limit_predict_batches(), "limit_predict_batches"),
                       return_predictions);
  });
  return out;
}

void Trainer::log_from_module(const std::string& name, const torch::Tensor& value, const LogOptions& options) {
  if (record_logged(name, value, options)) sync_logged(options);
}

void Trainer::log_from_module(const std::map<std::string, torch::Tensor>& values, const LogOptions& options) {
  bool recorded = false;
  for (const auto& [name, value] : values) recorded = record_logged(name, value, options) || recorded;
  if (recorded) sync_logged(options);
}

void Trainer::log_from_module(const std::string& name, metrics::Metric& metric, const LogOptions& options) {
  ARC_CHECK(!options.rank_zero_only(), "log('", name, "'): a metric object combines every rank's updates, so ",
            "every rank logs it; drop rank_zero_only");
  if (options_.barebones()) return;
  const bool several = !state_->training && state_->num_dataloaders > 1 && options.add_dataloader_idx();
  logged_store(*state_).log(name, metric, options, state_->training,
                            several ? std::optional<int64_t>(state_->dataloader_idx) : std::nullopt);
}

bool Trainer::record_logged(const std::string& name, const torch::Tensor& value, const LogOptions& options) {
  ARC_CHECK(!options.rank_zero_only() || !options.sync_dist(), "log('", name, "'): rank_zero_only and sync_dist ",
            "contradict each other (a value from rank 0 alone has nothing to synchronize); drop one");
  if (options.rank_zero_only() && !is_global_zero()) return false;
  if (options_.barebones()) {
    if (!state_->barebones_log_said)
      console().info("log('{}') and every later log() do nothing: barebones=true turns logging off", name);
    state_->barebones_log_said = true;
    return false;
  }
  auto& store = logged_store(*state_);
  const bool several = !state_->training && state_->num_dataloaders > 1 && options.add_dataloader_idx();
  store.log(name, value, options, state_->training, state_->current_batch_size,
            several ? std::optional<int64_t>(state_->dataloader_idx) : std::nullopt);
  return true;
}

void Trainer::sync_logged(const LogOptions& options) {
  if (!options.sync_dist()) return;
  state_->logging.sync_step_values(logged_store(*state_), state_->logging.sync_at_log, profiler_.get());
}

void Trainer::backward(TrainModule& module, const torch::Tensor& loss) {
  detail::call_hook(*this, module, "on_before_backward", &Callback::on_before_backward,
                    &TrainModule::on_before_backward, loss);
  {
    ProfileScope scope(profiler_.get(), profiler_ ? "[Strategy]" + strategy_->name() + ".backward" : "");
    strategy_->backward(precision_->pre_backward(loss));
  }
  detail::call_hook(*this, module, "on_after_backward", &Callback::on_after_backward, &TrainModule::on_after_backward);
}

void Trainer::zero_grad(torch::optim::Optimizer& optimizer, std::optional<int64_t> batch_idx) {
  detail::call_hook(*this, *module_, "on_before_zero_grad", &Callback::on_before_zero_grad,
                    &TrainModule::on_before_zero_grad, optimizer);
  ProfileScope scope(profiler_.get(), "[Trainer].zero_grad");
  if (batch_idx) {
    module_->optimizer_zero_grad(current_epoch(), *batch_idx, optimizer);
  } else {
    module_->TrainModule::optimizer_zero_grad(current_epoch(), state_->progress.epoch_batches, optimizer);
  }
}

void Trainer::optimizer_step(torch::optim::Optimizer& optimizer) {
  // Hooks and clipping see gradients at their true size.
  precision_->unscale(optimizer);
  detail::call_hook(*this, *module_, "on_before_optimizer_step", &Callback::on_before_optimizer_step,
                    &TrainModule::on_before_optimizer_step, optimizer);
  ProfileScope scope(profiler_.get(), "[Trainer].optimizer_step");
  if (module_->automatic_optimization())
    module_->configure_gradient_clipping(optimizer, options_.gradient_clip_val(), options_.gradient_clip_algorithm());
  strategy_->optimizer_step(optimizer, [&] { return precision_->optimizer_step(optimizer); });
  precision_->update();
  ++state_->progress.global_step;
}

Batch Trainer::transfer_batch(Batch batch, int64_t dataloader_idx) {
  module_->on_before_batch_transfer(batch, dataloader_idx);
  batch = module_->transfer_batch_to_device(batch, device(), dataloader_idx);
  module_->on_after_batch_transfer(batch, dataloader_idx);
  if (const auto dtype = precision_->input_dtype()) batch = batch.to(device(), dtype, /*non_blocking=*/true);
  return batch;
}

}  // namespace arc
