// EvaluationLoop: validation, test and predict passes.
#include <arc/core/detail/evaluation_loop.h>

#include <arc/base/detail/swapped.h>
#include <arc/core/detail/run_state.h>
#include <arc/data/data_loader.h>
#include <arc/strategies/strategy.h>

#include <c10/core/InferenceMode.h>
#include <torch/torch.h>

#include <optional>

namespace arc {
namespace {

using ModeHook = void (TrainModule::*)();

// Turns gradients off (inference mode, or no_grad) and puts the module in evaluation mode by its
// `to_eval` hook; finish() puts a module that was training back by its `to_train` hook (none:
// train()). A pass that fails restores the mode it found without calling them.
class EvalScope {
 public:
  EvalScope(TrainModule& module, bool inference_mode, ModeHook to_eval, ModeHook to_train = nullptr)
      : module_(module), was_training_(module.is_training()), to_train_(to_train) {
    if (inference_mode)
      inference_.emplace();
    else
      no_grad_.emplace();
    (module_.*to_eval)();
  }
  void finish() {
    finished_ = true;
    if (!was_training_)
      module_.eval();
    else if (to_train_ != nullptr)
      (module_.*to_train_)();
    else
      module_.train();
  }
  ~EvalScope() {
    if (!finished_) module_.train(was_training_);
  }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  TrainModule& module_;
  bool was_training_;
  ModeHook to_train_;
  bool finished_ = false;
  std::optional<c10::InferenceMode> inference_;
  std::optional<torch::NoGradGuard> no_grad_;
};

// One hook of both the callbacks and the module, called through detail::call_hook.
template <typename... Args>
struct Hook {
  const char* name;
  void (Callback::*callback)(Trainer&, TrainModule&, Args...);
  void (TrainModule::*module)(Args...);
};

// The hooks and step of an evaluation stage: validation's (also inside fit) or test's.
struct StageHooks {
  Hook<> start, epoch_start, epoch_end, end;
  Hook<Batch&, int64_t> batch_start, batch_end;
  void (TrainModule::*step)(Batch&, int64_t, int64_t);
  ModeHook model_eval, model_train;
  const char* step_name;
  /// The profiler's name for fetching a batch.
  const char* next_action;
};

const StageHooks kValidationHooks = {
    {"on_validation_start", &Callback::on_validation_start, &TrainModule::on_validation_start},
    {"on_validation_epoch_start", &Callback::on_validation_epoch_start, &TrainModule::on_validation_epoch_start},
    {"on_validation_epoch_end", &Callback::on_validation_epoch_end, &TrainModule::on_validation_epoch_end},
    {"on_validation_end", &Callback::on_validation_end, &TrainModule::on_validation_end},
    {"on_validation_batch_start", &Callback::on_validation_batch_start, &TrainModule::on_validation_batch_start},
    {"on_validation_batch_end", &Callback::on_validation_batch_end, &TrainModule::on_validation_batch_end},
    &TrainModule::validation_step,
    &TrainModule::on_validation_model_eval,
    &TrainModule::on_validation_model_train,
    "validation_step",
    "[EvaluationLoop].val_next"};

const StageHooks kTestHooks = {
    {"on_test_start", &Callback::on_test_start, &TrainModule::on_test_start},
    {"on_test_epoch_start", &Callback::on_test_epoch_start, &TrainModule::on_test_epoch_start},
    {"on_test_epoch_end", &Callback::on_test_epoch_end, &TrainModule::on_test_epoch_end},
    {"on_test_end", &Callback::on_test_end, &TrainModule::on_test_end},
    {"on_test_batch_start", &Callback::on_test_batch_start, &TrainModule::on_test_batch_start},
    {"on_test_batch_end", &Callback::on_test_batch_end, &TrainModule::on_test_batch_end},
    &TrainModule::test_step,
    &TrainModule::on_test_model_eval,
    &TrainModule::on_test_model_train,
    "test_step",
    "[EvaluationLoop].test_next"};

template <typename T>
struct Same {
  using type = T;
};

// Calls `hook` on every callback, then on the module; `args` take the hook's types.
template <typename... Args>
void call(Trainer& trainer, TrainModule& module, const Hook<Args...>& hook, typename Same<Args>::type... args) {
  detail::call_hook(trainer, module, hook.name, hook.callback, hook.module, args...);
}

// The loader's next batch, timed as `action` when profiling.
std::optional<Batch> next(Profiler* profiler, DataLoader& loader, const char* action) {
  ProfileScope scope(profiler, action);
  return loader.next();
}

// How a batch's on_step values with sync_dist are synced. Over a stream each rank runs its own share
// to its end, so the ranks' batch counts may differ and no per-batch collective can pair up: such a
// value is an error on every rank at its first batch (the epoch values sync after the loop, where
// every rank arrives).
GatherFn step_gather(GatherFn gather, const DataLoader& loader) {
  if (!gather || loader.num_batches() != kUnknownLength) return gather;
  return [](const std::vector<double>&) -> std::vector<std::vector<double>> {
    ARC_FAIL("a value logged with on_step=true and sync_dist=true in an evaluation step over a stream: each ",
             "rank evaluates its own share of the stream, and the shares' batch counts may differ, so the ranks ",
             "cannot sync every batch; log it with on_step=false (the epoch value is synced over all samples) ",
             "or sync_dist=false");
  };
}

}  // namespace

EvaluationLoop::EvaluationLoop(Trainer& trainer, detail::RunState& state, TrainModule& module, Stage stage)
    : trainer_(trainer), state_(state), module_(module), stage_(stage) {}

int64_t limited_batches(int64_t available, const BatchAmount& limit, const char* option) {
  ARC_CHECK(available != kUnknownLength || !limit.is_fraction || limit.value == 1.0, option, "=", limit.value,
            " is a fraction of the batches, but the data is a stream of unknown length; give a number of batches ",
            "instead (e.g. ", option, "=100)");
  return limit.of(available);
}

std::vector<int64_t> limited_batches(const Loaders& loaders, const BatchAmount& limit, const char* option) {
  std::vector<int64_t> out;
  for (const auto& loader : loaders) out.push_back(limited_batches(loader->num_batches(), limit, option));
  return out;
}

// The stage's loaders as the module's steps see them: which one runs, and how many there are (a
// stream's count is unknown).
void EvaluationLoop::start(const std::vector<int64_t>& batches) {
  state_.num_val_batches = 0;
  for (const int64_t count : batches) {
    const bool unknown = count == kUnknownLength || state_.num_val_batches == kUnknownLength;
    state_.num_val_batches = unknown ? kUnknownLength : state_.num_val_batches + count;
  }
  state_.num_dataloaders = static_cast<int64_t>(batches.size());
  state_.dataloader_idx = 0;
}

template <typename Step>
void EvaluationLoop::each_batch(Loaders& loaders, const std::vector<int64_t>& batches, const char* next_action,
                                Step&& step) {
  auto& t = trainer_;
  for (size_t index = 0; index < loaders.size(); ++index) {
    const auto dataloader_idx = static_cast<int64_t>(index);
    state_.dataloader_idx = dataloader_idx;
    auto& loader = *loaders[index];
    const Swapped<GatherFn> at_log(state_.logging.sync_at_log, step_gather(state_.logging.gather(), loader));
    loader.start();
    for (int64_t batch_idx = 0; batch_idx < batches[index]; ++batch_idx) {
      auto fetched = next(t.profiler(), loader, next_action);
      if (!fetched) break;
      Batch batch = t.transfer_batch(std::move(*fetched), dataloader_idx);
      state_.current_batch_size = batch.batch_size();
      step(loader, batch, batch_idx, dataloader_idx);
    }
  }
  state_.dataloader_idx = 0;
}

Metrics EvaluationLoop::run(Loaders& loaders, const std::vector<int64_t>& batches) {
  auto& t = trainer_;
  const bool was_training = state_.training;
  state_.training = false;
  if (was_training && !state_.sanity_checking) state_.validation_running = state_.progress.validation_runs + 1;
  start(batches);
  const Swapped<GatherFn> at_log(state_.logging.sync_at_log, state_.logging.gather());
  state_.logging.eval_metrics.clear();
  Metrics epoch_metrics;
  {
    const auto& hooks = stage_ == Stage::test ? kTestHooks : kValidationHooks;
    EvalScope scope(module_, t.options().inference_mode(), hooks.model_eval, hooks.model_train);
    call(t, module_, hooks.start);
    call(t, module_, hooks.epoch_start);
    each_batch(loaders, batches, hooks.next_action, [&](DataLoader&, Batch& batch, int64_t batch_idx, int64_t index) {
      const auto autocast = t.precision().forward_context();
      call(t, module_, hooks.batch_start, batch, batch_idx);
      {
        ProfileScope scope(t.profiler(), detail::module_action(t.profiler(), module_, hooks.step_name));
        const Swapped<GatherFn> waiting(state_.logging.sync_at_log, nullptr);
        (module_.*hooks.step)(batch, batch_idx, index);
      }
      state_.logging.sync_step_values(state_.logging.eval_metrics, state_.logging.sync_at_log, t.profiler());
      call(t, module_, hooks.batch_end, batch, batch_idx);
      // Values logged with on_step reach the loggers after every batch, at the batch's index as the
      // step, as Lightning logs them (not in the sanity check).
      if (!state_.sanity_checking)
        state_.logging.send(state_.logging.eval_metrics.step_logger_metrics(), state_.progress, batch_idx);
    });
    call(t, module_, hooks.epoch_end);
    epoch_metrics = state_.logging.eval_metrics.end_epoch(state_.logging.gather());
    if (!state_.sanity_checking) state_.logging.send(epoch_metrics, state_.progress);
    // Fit's validation counts before its end hooks, so that a checkpoint they write resumes after it.
    if (was_training && !state_.sanity_checking) ++state_.progress.validation_runs;
    call(t, module_, hooks.end);
    scope.finish();
  }
  state_.training = was_training;
  state_.validation_running = 0;
  return epoch_metrics;
}

std::vector<torch::Tensor> EvaluationLoop::predict(Loaders& loaders, const std::vector<int64_t>& batches, bool keep) {
  auto& t = trainer_;
  start(batches);
  std::vector<torch::Tensor> outputs;
  EvalScope scope(module_, t.options().inference_mode(), &TrainModule::on_predict_model_eval);
  call(t, module_, Hook<>{"on_predict_start", &Callback::on_predict_start, &TrainModule::on_predict_start});
  call(t, module_,
       Hook<>{"on_predict_epoch_start", &Callback::on_predict_epoch_start, &TrainModule::on_predict_epoch_start});
  each_batch(loaders, batches, "[EvaluationLoop].predict_next",
             [&](DataLoader& loader, Batch& batch, int64_t batch_idx, int64_t index) {
               state_.batch_indices = loader.last_indices();
               call(t, module_,
                    Hook<Batch&, int64_t>{"on_predict_batch_start", &Callback::on_predict_batch_start,
                                          &TrainModule::on_predict_batch_start},
                    batch, batch_idx);
               torch::Tensor output;
               {
                 const auto autocast = t.precision().forward_context();
                 ProfileScope scope(t.profiler(), detail::module_action(t.profiler(), module_, "predict_step"));
                 output = module_.predict_step(batch, batch_idx, index);
               }
               call(t, module_,
                    Hook<const torch::Tensor&, Batch&, int64_t>{"on_predict_batch_end", &Callback::on_predict_batch_end,
                                                                &TrainModule::on_predict_batch_end},
                    output, batch, batch_idx);
               if (keep) outputs.push_back(std::move(output));
             });
  call(t, module_, Hook<>{"on_predict_epoch_end", &Callback::on_predict_epoch_end, &TrainModule::on_predict_epoch_end});
  call(t, module_, Hook<>{"on_predict_end", &Callback::on_predict_end, &TrainModule::on_predict_end});
  scope.finish();
  return outputs;
}

}  // namespace arc
