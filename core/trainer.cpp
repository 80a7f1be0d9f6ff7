// Trainer: option resolution, stage set-up and tear-down, and the glue between module,
// callbacks, loggers and metric stores. The loops live in fit_loop.cpp and evaluation_loop.cpp.
#include <arc/core/trainer.h>

#include <arc/accelerators/accelerator_backend.h>
#include <arc/callbacks/elastic_checkpoint.h>
#include <arc/callbacks/model_checkpoint.h>
#include <arc/callbacks/model_summary.h>
#include <arc/callbacks/progress_bar.h>
#include <arc/core/checkpoint.h>
#include <arc/core/checkpoint_connector.h>
#include <arc/core/console.h>
#include <arc/core/data_loader.h>
#include <arc/core/evaluation_loop.h>
#include <arc/core/fit_loop.h>
#include <arc/loggers/folder_logger.h>
#include <arc/strategies/rank_processes.h>
#include <arc/strategies/strategy.h>

#include <malloc.h>
#include <torch/torch.h>
#include <cstdio>
#include <cstdlib>

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

}  // namespace

const char* to_string(Stage stage) {
  switch (stage) {
    case Stage::fit:
      return "fit";
    case Stage::validate:
      return "validate";
    case Stage::test:
      return "test";
    case Stage::predict:
      return "predict";
  }
  return "fit";
}

Trainer::Trainer(TrainerOptions options, std::vector<std::shared_ptr<Callback>> callbacks,
                 std::vector<std::shared_ptr<Logger>> loggers)
    : options_(apply_overfit_batches(apply_fast_dev_run(std::move(options)))),
      callbacks_(std::move(callbacks)),
      loggers_(std::move(loggers)) {
  options_.validate();
  if (options_.fast_dev_run() > 0) loggers_.clear();
  accelerator_ = resolve_accelerator(options_.accelerator());
  strategy_ = resolve_strategy(
      options_.strategy(), static_cast<int64_t>(accelerator_->select(options_.devices()).size()), options_.num_nodes());
  strategy_->setup(*accelerator_, options_);
  precision_ = std::make_unique<Precision>(options_.precision(), strategy_->root_device());
  agree_on_logger_versions();
  add_default_callbacks();
}

// Rank 0 picks each logger's version and every rank takes it, as Lightning broadcasts log_dir:
// the loggers of one folder share the version given to any of them, or else the next free one.
void Trainer::agree_on_logger_versions() {
  nlohmann::json versions = nlohmann::json::array();
  if (is_global_zero()) {
    std::map<std::string, int64_t> chosen;
    for (const auto& logger : loggers_)
      if (logger->version_fixed()) chosen.emplace(logger->versions_folder(), logger->version_number());
    for (const auto& logger : loggers_) {
      const std::string folder = logger->versions_folder();
      if (!folder.empty() && !logger->version_fixed()) {
        auto [entry, inserted] = chosen.emplace(folder, 0);
        if (inserted) entry->second = next_version(folder);
        logger->set_version_number(entry->second);
      }
      versions.push_back(logger->version_number());
    }
  }
  versions = nlohmann::json::parse(strategy_->broadcast(versions.dump()));
  for (size_t i = 0; i < loggers_.size(); ++i)
    if (!loggers_[i]->versions_folder().empty()) loggers_[i]->set_version_number(versions.at(i).get<int64_t>());
}

Trainer::~Trainer() = default;

void Trainer::add_default_callbacks() {
  const auto has = [&](auto* probe) {
    using T = std::remove_pointer_t<decltype(probe)>;
    for (const auto& callback : callbacks_)
      if (std::dynamic_pointer_cast<T>(callback)) return true;
    return false;
  };
  if (options_.enable_model_summary() && !has(static_cast<ModelSummary*>(nullptr)))
    callbacks_.push_back(std::make_shared<ModelSummary>());
  if (options_.enable_progress_bar() && !has(static_cast<ProgressBar*>(nullptr)))
    callbacks_.push_back(std::make_shared<ProgressBar>());
  // Lightning's default checkpointing, plus last.ckpt so that ckpt_path="last" can resume.
  if (options_.enable_checkpointing() && !has(static_cast<ModelCheckpoint*>(nullptr)))
    callbacks_.push_back(std::make_shared<ModelCheckpoint>(ModelCheckpointOptions().save_last(true)));
  const bool periodic =
      options_.elastic_checkpoint_every_n_steps() > 0 || options_.elastic_checkpoint_every_seconds() > 0;
  if (strategy_->elastic() && periodic && !has(static_cast<ElasticCheckpoint*>(nullptr)))
    callbacks_.push_back(std::make_shared<ElasticCheckpoint>(options_.elastic_checkpoint_every_n_steps(),
                                                             options_.elastic_checkpoint_every_seconds()));
}

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

double Trainer::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - stage_start_).count();
}

void Trainer::request_stop(const std::string& reason) {
  should_stop_ = true;
  stop_reason_ = reason;
}

Metrics Trainer::progress_bar_metrics() const {
  auto metrics = eval_metrics_.prog_bar_metrics();
  for (const auto& [name, value] : train_metrics_.prog_bar_metrics()) metrics[name] = value;
  return metrics;
}

void Trainer::setup_environment() {
  torch::set_num_threads(static_cast<int>(options_.threads_per_process(strategy_->local_world_size())));
  if (options_.tune_malloc()) keep_large_buffers_in_heap();
  if (options_.seed()) torch::manual_seed(*options_.seed());
  auto& context = at::globalContext();
  context.setDeterministicAlgorithms(options_.deterministic(), false);
  context.setDeterministicCuDNN(options_.deterministic());
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
}

void Trainer::run_stage(Stage stage, TrainModule& module, DataModule* data, const std::function<void()>& body) {
  attach(module);
  stage_ = stage;
  stage_start_ = std::chrono::steady_clock::now();
  should_stop_ = false;
  stop_reason_.clear();
  train_metrics_.clear();
  eval_metrics_.clear();
  try {
    setup_environment();
    if (data != nullptr) {
      if (strategy_->local_rank() == 0) data->prepare_data();
      strategy_->barrier();
      data->setup(stage);
    }
    module.setup(stage);
    precision_->convert_module(module);
    strategy_->setup_module(module);
    body();
    strategy_->teardown();
    module.teardown(stage);
    if (data != nullptr) data->teardown(stage);
    if (is_global_zero())
      for (auto& logger : loggers_) logger->finalize("success");
  } catch (const Interrupted& interrupted) {
    end_interrupted(module, interrupted);
  } catch (const std::exception& error) {
    strategy_->on_failure(error.what());
    call_callbacks([&](Callback& c) { c.on_exception(*this, module, error); });
    if (is_global_zero())
      for (auto& logger : loggers_) logger->finalize("failed");
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
  if (is_global_zero())
    for (auto& logger : loggers_) logger->finalize("failed");
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

DataSource Trainer::pick(DataSource given, DataModule* data, DataSource (DataModule::*from_data)(),
                         DataSource (TrainModule::*from_module)(), TrainModule& module, const char* what) const {
  if (given) return given;
  if (data != nullptr) {
    if (auto source = (data->*from_data)()) return source;
  }
  if (auto source = (module.*from_module)()) return source;
  if (what != nullptr)
    ARC_FAIL("no ", what, " data: pass a DataSource or a DataModule, or override ", what,
             "_dataloader() in the module or data module");
  return {};
}

std::unique_ptr<DataLoader> Trainer::make_loader(const DataSource& source) const {
  if (!source) return nullptr;
  DataSource adjusted = source;
  if (!options_.overfit_batches().is_zero()) adjusted.options.shuffle(false);
  return std::make_unique<DataLoader>(adjusted, strategy_->global_rank(), strategy_->world_size(),
                                      options_.seed().value_or(0));
}

void Trainer::configure_optimizers(TrainModule& module) {
  optimizers_ = module.configure_optimizers();
  ARC_CHECK(
      !optimizers_.empty() || !module.automatic_optimization(),
      "configure_optimizers() returned no optimizer; return at least one, e.g. std::make_shared<torch::optim::SGD>(",
      "parameters(), torch::optim::SGDOptions(0.1))");
  ARC_CHECK(optimizers_.size() <= 1 || !module.automatic_optimization(), "configure_optimizers() of ", module.name(),
            " returned ", optimizers_.size(), " optimizers, but automatic optimization steps one, as Lightning's ",
            "does; call set_automatic_optimization(false) and step each in training_step (optimizers(), ",
            "manual_backward), or return one optimizer with a parameter group per part");
  for (const auto& config : optimizers_) {
    ARC_CHECK(
        config.optimizer != nullptr, "configure_optimizers() of ", module.name(),
        " returned a null optimizer; return one made with std::make_shared<torch::optim::...>(parameters(), ...)");
    if (!config.lr_scheduler) continue;
    const auto& scheduler = *config.lr_scheduler;
    ARC_CHECK(scheduler.scheduler != nullptr, "an lr_scheduler config has no scheduler; set its `scheduler`");
    ARC_CHECK(scheduler.frequency >= 1, "lr_scheduler frequency must be >= 1, got ", scheduler.frequency);
    ARC_CHECK(!scheduler.scheduler->needs_metric() || !scheduler.monitor.empty(),
              "ReduceLROnPlateau needs `monitor` in its scheduler config, e.g. \"val_loss\"");
  }
}

void Trainer::fit(TrainModule& module, DataModule& data, const std::string& ckpt_path) {
  run_fit(module, &data, {}, {}, ckpt_path);
}

void Trainer::fit(TrainModule& module, DataSource train, DataSource val, const std::string& ckpt_path) {
  run_fit(module, nullptr, std::move(train), std::move(val), ckpt_path);
}

void Trainer::run_fit(TrainModule& module, DataModule* data, DataSource train, DataSource val,
                      const std::string& ckpt_path) {
  run_stage(Stage::fit, module, data, [&] {
    auto train_source =
        pick(std::move(train), data, &DataModule::train_dataloader, &TrainModule::train_dataloader, module, "train");
    auto val_source =
        pick(std::move(val), data, &DataModule::val_dataloader, &TrainModule::val_dataloader, module, nullptr);
    // What saves that a crash or SIGKILL interrupted left behind in this run's folders.
    if (is_global_zero())
      for (const auto& folder : {options_.default_root_dir(), log_dir() + "/checkpoints"})
        remove_stale_temporaries(folder);
    std::string resume = ckpt_path.empty() ? "" : CheckpointConnector(*this).resolve(ckpt_path);
    // Rank 0 picks, so that every rank resumes from the same file.
    const auto automatic =
        strategy_->broadcast(is_global_zero() ? CheckpointConnector(*this).automatic_resume_path() : std::string());
    if (!automatic.empty()) {
      console().info("resuming from '{}' instead of {} (restart {} of this job)", automatic,
                     resume.empty() ? "starting afresh" : "'" + resume + "'", strategy_->restart_count());
      resume = automatic;
    }
    FitLoop(*this, module, make_loader(train_source), make_loader(val_source), resume).run();
  });
}

void Trainer::load_weights(TrainModule& module, const std::string& ckpt_path) {
  if (!ckpt_path.empty())
    CheckpointConnector(*this).restore_weights(module, CheckpointConnector(*this).resolve(ckpt_path));
}

void Trainer::set_accumulate_grad_batches(int64_t batches) {
  ARC_CHECK(batches >= 1, "accumulate_grad_batches must be >= 1, got ", batches);
  accumulate_grad_batches_ = batches;
}

void Trainer::save_checkpoint(const std::string& path, bool weights_only) {
  TrainModule* module = module_ != nullptr ? module_ : last_module_;
  ARC_CHECK(module != nullptr,
            "save_checkpoint needs a module: call it during or after fit, validate, test or predict");
  CheckpointConnector(*this).save(*module, path, weights_only);
}

Metrics Trainer::validate(TrainModule& module, DataModule& data, const std::string& ckpt_path) {
  return run_evaluation(Stage::validate, module, &data, {}, ckpt_path);
}

Metrics Trainer::validate(TrainModule& module, DataSource val, const std::string& ckpt_path) {
  return run_evaluation(Stage::validate, module, nullptr, std::move(val), ckpt_path);
}

Metrics Trainer::test(TrainModule& module, DataModule& data, const std::string& ckpt_path) {
  return run_evaluation(Stage::test, module, &data, {}, ckpt_path);
}

Metrics Trainer::test(TrainModule& module, DataSource test_data, const std::string& ckpt_path) {
  return run_evaluation(Stage::test, module, nullptr, std::move(test_data), ckpt_path);
}

Metrics Trainer::run_evaluation(Stage stage, TrainModule& module, DataModule* data, DataSource given,
                                const std::string& ckpt_path) {
  const bool testing = stage == Stage::test;
  Metrics out;
  run_stage(stage, module, data, [&] {
    load_weights(module, ckpt_path);
    auto source = testing ? pick(std::move(given), data, &DataModule::test_dataloader, &TrainModule::test_dataloader,
                                 module, "test")
                          : pick(std::move(given), data, &DataModule::val_dataloader, &TrainModule::val_dataloader,
                                 module, "validation");
    const auto& limit = testing ? options_.limit_test_batches() : options_.limit_val_batches();
    out = EvaluationLoop(*this, module, stage).run(*make_loader(source), limit);
  });
  return out;
}

std::vector<torch::Tensor> Trainer::predict(TrainModule& module, DataModule& data, const std::string& ckpt_path) {
  return run_predict(module, &data, {}, ckpt_path);
}

std::vector<torch::Tensor> Trainer::predict(TrainModule& module, DataSource predict_data,
                                            const std::string& ckpt_path) {
  return run_predict(module, nullptr, std::move(predict_data), ckpt_path);
}

std::vector<torch::Tensor> Trainer::run_predict(TrainModule& module, DataModule* data, DataSource given,
                                                const std::string& ckpt_path) {
  std::vector<torch::Tensor> out;
  run_stage(Stage::predict, module, data, [&] {
    load_weights(module, ckpt_path);
    auto source = pick(std::move(given), data, &DataModule::predict_dataloader, &TrainModule::predict_dataloader,
                       module, "predict");
    out = EvaluationLoop(*this, module, Stage::predict).predict(*make_loader(source), options_.limit_predict_batches());
  });
  return out;
}

void Trainer::log_from_module(const std::string& name, const torch::Tensor& value, const LogOptions& options) {
  auto& store = training_ ? train_metrics_ : eval_metrics_;
  store.log(name, value, options, training_, current_batch_size_);
}

const Metrics& Trainer::callback_metrics() const {
  // Step values are read lazily: converting them every step would cost a sync per metric.
  for (const auto& [name, value] : train_metrics_.callback_metrics()) callback_metrics_[name] = value;
  for (const auto& [name, value] : eval_metrics_.callback_metrics()) callback_metrics_[name] = value;
  return callback_metrics_;
}

GatherFn Trainer::metric_gather() const {
  auto* group = strategy_->collectives();
  if (group == nullptr || group->world_size() == 1) return nullptr;
  return [group](const std::vector<double>& values) {
    const auto local = torch::tensor(values, torch::kDouble);
    std::vector<std::vector<double>> out;
    for (const auto& rank : group->all_gather(local)) {
      const double* data = rank.data_ptr<double>();
      out.emplace_back(data, data + rank.numel());
    }
    return out;
  };
}

void Trainer::send_to_loggers(const Metrics& metrics) {
  if (metrics.empty() || !is_global_zero()) return;
  Metrics with_epoch = metrics;
  with_epoch["epoch"] = static_cast<double>(progress_.current_epoch);
  for (auto& logger : loggers_) logger->log_metrics(with_epoch, progress_.global_step);
  for (const auto& [name, value] : with_epoch) logged_metrics_[name] = value;
}

void Trainer::backward(TrainModule& module, const torch::Tensor& loss) {
  module.on_before_backward(loss);
  call_callbacks([&](Callback& c) { c.on_before_backward(*this, module, loss); });
  strategy_->backward(precision_->pre_backward(loss));
  module.on_after_backward();
  call_callbacks([&](Callback& c) { c.on_after_backward(*this, module); });
}

void Trainer::zero_grad(torch::optim::Optimizer& optimizer) {
  module_->on_before_zero_grad(optimizer);
  call_callbacks([&](Callback& c) { c.on_before_zero_grad(*this, *module_, optimizer); });
  // set_to_none: the next backward writes gradients instead of adding to zeros.
  for (auto& group : optimizer.param_groups())
    for (auto& parameter : group.params())
      if (parameter.grad().defined()) parameter.mutable_grad() = torch::Tensor();
}

void Trainer::manual_optimizer_step(torch::optim::Optimizer& optimizer) {
  precision_->unscale(optimizer);
  module_->on_before_optimizer_step(optimizer);
  call_callbacks([&](Callback& c) { c.on_before_optimizer_step(*this, *module_, optimizer); });
  precision_->optimizer_step(optimizer);
  precision_->update();
  ++progress_.global_step;
}

}  // namespace arc
