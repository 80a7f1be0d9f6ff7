// FitLoop: training epochs and the optimization step.
#include <arc/core/detail/fit_loop.h>

#include <arc/base/console.h>
#include <arc/base/detail/swapped.h>
#include <arc/core/detail/checkpoint_connector.h>
#include <arc/core/detail/evaluation_loop.h>
#include <arc/core/detail/run_state.h>
#include <arc/core/detail/signal_connector.h>
#include <arc/data/data_loader.h>
#include <arc/data/dataset.h>
#include <arc/strategies/strategy.h>

#include <torch/torch.h>

#include <algorithm>

namespace arc {

using detail::call_hook;

FitLoop::FitLoop(Trainer& trainer, detail::RunState& state, TrainModule& module, FitData data, std::string resume_from)
    : trainer_(trainer), state_(state), module_(module), data_(std::move(data)), resume_from_(std::move(resume_from)) {
  state_.fit_loop = this;
  load_train();
  load_val();
  count_training();
}

void FitLoop::reload_train() {
  load_train();
  count_training();
}

void FitLoop::count_training() {
  const auto& o = trainer_.options();
  const int64_t n = state_.num_training_batches;
  const bool unknown = n == kUnknownLength;
  const int64_t per_epoch = unknown ? n : (n + o.accumulate_grad_batches() - 1) / o.accumulate_grad_batches();
  // A stream's epochs have no known length: only max_steps bounds the fit ahead (-1: unknown).
  if (max_epochs() == -1 || unknown)
    state_.estimated_stepping_batches = o.max_steps();
  else if (o.max_steps() == -1)
    state_.estimated_stepping_batches = per_epoch * max_epochs();
  else
    state_.estimated_stepping_batches = std::min(per_epoch * max_epochs(), o.max_steps());
  const auto& interval = o.val_check_interval();
  if (interval.is_time) {
    val_every_ = 0;  // by the clock: validation_wanted()
  } else if (interval.is_fraction) {
    ARC_CHECK(!unknown || interval.value == 1.0, "val_check_interval=", interval.value,
              " is a fraction of an epoch, but the training data is a stream of unknown length; give a number of ",
              "batches (e.g. val_check_interval=1000) or a duration, or 1.0 to validate at each epoch's end");
    val_every_ =
        unknown ? kUnknownLength : std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(n) * interval.value));
  } else {
    val_every_ = static_cast<int64_t>(interval.value);
    ARC_CHECK(
        n == 0 || val_every_ <= n || !o.check_val_every_n_epoch(), "val_check_interval=", val_every_,
        " is more than the ", n,
        " training batches of an epoch; lower it, use a fraction such as 0.5, or set check_val_every_n_epoch=null ",
        "to count batches over the whole fit");
  }
}

// Also where a failed fit ends: a file being written is finished (or its failure said) before the
// exception goes on.
FitLoop::~FitLoop() {
  state_.train_loader = nullptr;
  state_.fit_loop = nullptr;
  state_.background_saves = false;
  state_.checkpoint_writes.wait();
  if (const auto failure = state_.checkpoint_writes.take_failure())
    console().warn("a checkpoint written in the background failed: {}", *failure);
  state_.checkpoint_writes.release();
}

void FitLoop::load_train() {
  train_ = data_.train();
  state_.train_loader = train_.get();
  train_limit_ =
      limited_batches(train_->num_batches(), trainer_.options().limit_train_batches(), "limit_train_batches");
  state_.num_training_batches = train_limit_;
}

void FitLoop::load_val() {
  val_ = data_.val();
  val_batches_ = limited_batches(val_, trainer_.options().limit_val_batches(), "limit_val_batches");
  val_loaded_epoch_ = state_.progress.current_epoch;
}

bool FitLoop::has_validation() const {
  return std::any_of(val_batches_.begin(), val_batches_.end(), [](int64_t batches) { return batches > 0; });
}

std::vector<OptimizerConfig> checked_optimizers(TrainModule& module) {
  auto optimizers = module.configure_optimizers();
  ARC_CHECK(!module.optimizer_config_unused(), "the config names an optimizer or lr_scheduler, but ", module.name(),
            "'s configure_optimizers() does not take it; build the optimizer with configured_optimizer(parameters(), ",
            "...) there, or remove those sections from the config");
  ARC_CHECK(
      !optimizers.empty() || !module.automatic_optimization(),
      "configure_optimizers() returned no optimizer; return at least one, e.g. std::make_shared<torch::optim::SGD>(",
      "parameters(), torch::optim::SGDOptions(0.1))");
  ARC_CHECK(optimizers.size() <= 1 || !module.automatic_optimization(), "configure_optimizers() of ", module.name(),
            " returned ", optimizers.size(), " optimizers, but automatic optimization steps one, as Lightning's ",
            "does; call set_automatic_optimization(false) and step each in training_step (optimizers(), ",
            "manual_backward), or return one optimizer with a parameter group per part");
  for (const auto& config : optimizers) {
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
  return optimizers;
}

// Read at each use: Trainer::set_max_epochs may raise it (between fits, or from a callback).
int64_t FitLoop::max_epochs() const {
  const auto& o = trainer_.options();
  return o.max_epochs().value_or(o.max_steps() == -1 ? 1000 : -1);
}

bool FitLoop::epochs_done() const { return max_epochs() != -1 && state_.progress.current_epoch >= max_epochs(); }

bool FitLoop::steps_done() const {
  const auto& o = trainer_.options();
  return (o.max_steps() != -1 && state_.progress.global_step >= o.max_steps()) || time_up();
}

// Lightning's _can_stop_early: min_epochs and min_steps, which a stop request and max_time wait for.
bool FitLoop::can_stop_early() const {
  const auto& o = trainer_.options();
  const bool epochs_met = !o.min_epochs() || state_.progress.current_epoch >= *o.min_epochs();
  const bool steps_met = !o.min_steps() || state_.progress.global_step >= *o.min_steps();
  return epochs_met && steps_met;
}

// A stop asked for on any rank (request_stop), once the ranks agreed on it: every rank stops at
// the same batch, whatever each one's monitored values said.
bool FitLoop::stop_requested() const { return agreed_.stop > 0 && can_stop_early(); }

bool FitLoop::time_up() const { return agreed_.time_up > 0 && can_stop_early(); }

// As Lightning's loop, a fit that stops after this batch because it was asked to (request_stop, a
// Timer) or its max_time passed validates first: where this epoch validates, unless a validation
// came after the stop was asked for (max_steps stops without one, as in Lightning).
bool FitLoop::validation_at_stop() const {
  const int64_t after = std::max(stop_requested() ? agreed_.stop : 0, time_up() ? agreed_.time_up : 0);
  return after > state_.progress.validation_runs && validates_this_epoch();
}

void FitLoop::run() {
  auto& t = trainer_;
  state_.optimizers = checked_optimizers(module_);
  // As Lightning's fit loop, the progress of this Trainer's earlier fit stays: a second fit goes on
  // from its epoch and step, up to limits that Trainer::set_max_epochs and set_max_steps may raise.
  state_.accumulate_grad_batches = t.options().accumulate_grad_batches();
  if (!resume_from_.empty()) {
    CheckpointConnector(t, state_).restore_training(module_, resume_from_);
    first_batch_ = state_.progress.epoch_batches;
    console().info("resumed from '{}' at epoch {}, batch {}, global step {}", resume_from_,
                   state_.progress.current_epoch, first_batch_, state_.progress.global_step);
  }
  done_at_start_ = epochs_done() || steps_done();
  state_.training = true;
  state_.background_saves = true;
  const Swapped<GatherFn> at_log(state_.logging.sync_at_log, state_.logging.gather());
  module_.train();
  // A tuning run inside fit runs the training hooks only, as Lightning's tuners run its fit loop.
  if (!state_.tuning) {
    call_hook(t, module_, "on_fit_start", &Callback::on_fit_start, &TrainModule::on_fit_start);
    // After on_fit_start, as Lightning's: a rate that LearningRateFinder wrote is in hparams.yaml.
    state_.logging.log_hyperparams(module_.hparams());
  }
  if (resume_from_.empty()) sanity_check();
  // A fit with nothing left to train skips the training hooks, as Lightning's.
  if (!done_at_start_) call_hook(t, module_, "on_train_start", &Callback::on_train_start, &TrainModule::on_train_start);
  signals_ = std::make_unique<SignalConnector>(t, state_);
  if (auto* group = t.strategy().collectives(); group != nullptr && group->world_size() > 1)
    stragglers_ = std::make_unique<StragglerMonitor>(*group);
  last_validation_ = std::chrono::steady_clock::now();
  agree(signals_->settle());
  if (state_.num_training_batches == 0)
    console().warn("no training batch selected (limit_train_batches or an empty dataset); fit skips training");
  warn_of_sparse_logging();
  while (state_.num_training_batches > 0 && !epochs_done() && !steps_done() && !stop_requested()) run_epoch();
  signals_.reset();
  stragglers_.reset();
  if (!done_at_start_) call_hook(t, module_, "on_train_end", &Callback::on_train_end, &TrainModule::on_train_end);
  if (!state_.tuning) call_hook(t, module_, "on_fit_end", &Callback::on_fit_end, &TrainModule::on_fit_end);
  finish_background_saves();
  state_.training = false;
  say_why_fit_ended();
}

// Lightning's warning: an epoch shorter than log_every_n_steps leaves epochs without a step in the
// loggers, which looks like missing logs.
void FitLoop::warn_of_sparse_logging() const {
  const int64_t batches = state_.num_training_batches, every = trainer_.options().log_every_n_steps();
  if (state_.tuning || trainer_.loggers().empty() || !trainer_.is_global_zero() || batches == kUnknownLength ||
      batches == 0 || batches >= every)
    return;
  console().warn(
      "an epoch has {} training batch{}, fewer than log_every_n_steps={}, so the loggers get training steps' "
      "values only every {} steps; set a lower log_every_n_steps to see them every epoch",
      batches, batches == 1 ? "" : "es", every, every);
}

void FitLoop::say_why_fit_ended() const {
  if (!state_.stop_reason.empty()) {
    console().info("fit stopped: {}", state_.stop_reason);
    return;
  }
  // A tuning run's limits are the tuner's, not the user's.
  if (state_.tuning) return;
  const auto& o = trainer_.options();
  if (time_up()) {
    std::string held;
    if (time_held_)
      for (const auto& [name, value] : {std::pair{"min_epochs", o.min_epochs()}, std::pair{"min_steps", o.min_steps()}})
        if (value) held += fmt::format("{}{}={}", held.empty() ? "" : " and ", name, *value);
    console().info("fit stopped: max_time={} s reached ({:.1f} s elapsed{})", o.max_time().value_or(0),
                   trainer_.elapsed_seconds(), held.empty() ? "" : ": " + held + " kept it going");
  } else if (o.max_steps() != -1 && state_.progress.global_step >= o.max_steps()) {
    console().info("fit stopped: max_steps={} reached{}", o.max_steps(), nothing_to_train("max_steps"));
  } else if (epochs_done()) {
    console().info("fit stopped: max_epochs={} reached{}", max_epochs(), nothing_to_train("max_epochs"));
  }
}

// Why a fit that trained nothing did not: an earlier fit of this Trainer, or the checkpoint it
// resumed from, had reached its `limit` already.
std::string FitLoop::nothing_to_train(const std::string& limit) const {
  if (!done_at_start_) return "";
  const std::string where = resume_from_.empty() ? "this Trainer's earlier fit" : "the checkpoint it resumed from";
  return fmt::format(
      " before this fit began ({} ended at epoch {}, global step {}): nothing was trained; raise {} "
      "(Trainer::set_{}) to train on",
      where, state_.progress.current_epoch, state_.progress.global_step, limit, limit);
}

void FitLoop::finish_background_saves() {
  state_.background_saves = false;
  state_.checkpoint_writes.wait();
  const auto failure = CheckpointConnector::rank_zero_write_failure(trainer_, state_.checkpoint_writes);
  ARC_CHECK(failure.empty(), "fit failed at its end: the last checkpoint written in the background ",
            "(async_checkpointing) failed on rank 0: ", failure);
  state_.checkpoint_writes.release();
}

void FitLoop::sanity_check() {
  const int64_t wanted = trainer_.options().num_sanity_val_steps();
  if (!has_validation() || wanted == 0) return;
  auto& t = trainer_;
  state_.sanity_checking = true;
  t.call_callbacks([&](Callback& c) { c.on_sanity_check_start(t, module_); });
  // num_sanity_val_steps of each loader, as Lightning's.
  auto batches = val_batches_;
  if (wanted != -1)
    for (auto& count : batches) count = std::min(count, wanted);
  EvaluationLoop(t, state_, module_, Stage::validate).run(val_, batches);
  t.call_callbacks([&](Callback& c) { c.on_sanity_check_end(t, module_); });
  state_.logging.eval_metrics.clear();
  state_.logging.clear_callback_metrics();
  state_.sanity_checking = false;
}

void FitLoop::run_epoch() {
  auto& t = trainer_;
  ProfileScope epoch_scope(t.profiler(), "run_training_epoch");
  auto& progress = state_.progress;
  // reload_dataloaders_every_n_epochs: the training data anew at each n-th epoch's start (the
  // first came with the loop).
  const int64_t reload = t.options().reload_dataloaders_every_n_epochs();
  if (reload > 0 && progress.current_epoch > 0 && progress.current_epoch % reload == 0) load_train();
  train_->set_epoch(progress.current_epoch);
  state_.num_training_batches = train_limit_;
  // A resumed run continues its epoch with the next batch of the same order, or of its stream (past
  // this rank's own batches when even_batches pads).
  const int64_t own = train_->num_batches();
  const bool padding = t.world_size() > 1 && t.options().even_batches() == "pad";
  const int64_t first = padding ? first_batch_ : std::min(first_batch_, train_limit_);
  first_batch_ = 0;
  train_->start(own > 0 && first > own ? first % own : first, state_.resumed_train_data);
  state_.resumed_train_data = nullptr;
  if (own == kUnknownLength || t.world_size() > 1) {
    vote(true);
    if (own != kUnknownLength) even_out();
  }
  progress.epoch_batches = first;
  call_hook(t, module_, "on_train_epoch_start", &Callback::on_train_epoch_start, &TrainModule::on_train_epoch_start);
  for (int64_t batch_idx = first; batch_idx < state_.num_training_batches; ++batch_idx) {
    if (steps_done() || stop_requested()) break;
    const auto fetch_start = std::chrono::steady_clock::now();
    std::optional<Batch> fetched;
    {
      ProfileScope scope(t.profiler(), "[FitLoop].train_dataloader_next");
      fetched = train_->next();
      // even_batches "pad": this rank's batches ran out before the others'; it repeats its epoch's.
      if (!fetched && own != kUnknownLength && own > 0) {
        train_->start();
        fetched = train_->next();
      }
    }
    if (!fetched) break;
    Batch batch = t.transfer_batch(std::move(*fetched), 0);
    // What the batch and the validation after it log goes to the loggers at the stepped batches
    // before it, as Lightning's (the first step's metrics at step 0).
    state_.logging.held_step = progress.stepped_batches;
    if (stragglers_) {
      timed_batch(batch, batch_idx, fetch_start);
    } else {
      run_batch(batch, batch_idx);
    }
    if (validation_due(batch_idx)) validate();
    vote(false);
    if (validation_at_stop()) validate();
    state_.logging.held_step.reset();
  }
  // Epoch metrics are ready for on_train_epoch_end; values logged there are added after it. They go
  // to the loggers at the epoch's last step, as Lightning's.
  state_.logging.held_step = std::max<int64_t>(0, progress.stepped_batches - 1);
  state_.logging.send(state_.logging.train_metrics.end_epoch(state_.logging.gather()), state_.progress);
  call_hook(t, module_, "on_train_epoch_end", &Callback::on_train_epoch_end, &TrainModule::on_train_epoch_end);
  state_.logging.send(state_.logging.train_metrics.end_epoch(state_.logging.gather()), state_.progress);
  state_.logging.held_step.reset();
  // Under manual optimization the module steps its schedulers itself (lr_schedulers()), as in Lightning.
  if (module_.automatic_optimization()) step_schedulers(Interval::epoch);
  // A checkpoint written from here to the next epoch's first batch (save_checkpoint once fit
  // returned, a signal settled below) resumes at that batch.
  ++progress.current_epoch;
  progress.epoch_batches = 0;
  agree(signals_->settle(validation_wanted()));
}

// The ranks' vote at a batch boundary (settle: waiting for it). Each rank that reads a stream says
// where its share ends once that is within kLookahead batches; the epoch ends at the earliest such
// end (or limit_train_batches' count, if sooner) on every rank. The vote cast after batch j takes effect after batch j
// + 1 and decides batch j + 2 and whether it is the last: it must know batches j + 1 to j + 3. Where an epoch starts
// (settle), ranks that read datasets also compare their batch counts (see even_out).
void FitLoop::vote(bool settle) {
  constexpr int64_t kLookahead = 3;
  int64_t end = kUnknownLength, most = 0;
  if (train_->num_batches() == kUnknownLength)
    end = train_->known_end(kLookahead).value_or(kUnknownLength);
  else if (settle)
    end = most = state_.num_training_batches;
  agree(settle ? signals_->settle(validation_wanted(), end, most) : signals_->check(validation_wanted(), end, most));
  state_.num_training_batches = std::min(state_.num_training_batches, agreed_.batches_end);
}

void FitLoop::agree(const SignalConnector::Decision& decision) {
  agreed_ = decision;
  // The vote just after an epoch's settle is the first of its kind and brings no clock.
  state_.agreed_seconds = std::max(state_.agreed_seconds, static_cast<double>(decision.elapsed_us) / 1e6);
  time_held_ = time_held_ || (agreed_.time_up > 0 && !can_stop_early());
}

// Ranks whose datasets give different batch counts (user-sharded data, a dataset per rank) would
// leave the longer ones waiting in an all-reduce at the end: even_batches says what to do instead,
// the same on every rank (the vote gave each the fewest and the most).
void FitLoop::even_out() {
  const int64_t fewest = agreed_.batches_end, most = agreed_.batches_most;
  if (most <= fewest) return;
  const auto& mode = trainer_.options().even_batches();
  ARC_CHECK(mode != "error", "the ranks' training data give different batch counts in epoch ",
            state_.progress.current_epoch, ": from ", fewest, " to ", most, " (rank ", trainer_.global_rank(), ": ",
            train_limit_, "); shard the data evenly, or set even_batches to \"pad\" (the ranks with fewer repeat ",
            "their first batches up to ", most, ") or \"drop\" (every rank stops after ", fewest, ")");
  ARC_CHECK(mode != "pad" || fewest > 0, "even_batches is \"pad\", but a rank has no training batch in epoch ",
            state_.progress.current_epoch, " to repeat (the most: ", most, "); give every rank data, or set ",
            "even_batches to \"drop\"");
  if (mode == "pad") state_.num_training_batches = most;
}

// run_batch under DDP, its times noted for the straggler statistics, which go to the loggers at
// every log_every_n_steps-th batch.
void FitLoop::timed_batch(Batch& batch, int64_t batch_idx, std::chrono::steady_clock::time_point fetch_start) {
  auto& group = *trainer_.strategy().collectives();
  const auto step_start = std::chrono::steady_clock::now();
  const double blocked = group.blocked_seconds();
  run_batch(batch, batch_idx);
  const auto step_end = std::chrono::steady_clock::now();
  stragglers_->add(std::chrono::duration<double>(step_start - fetch_start).count(),
                   std::chrono::duration<double>(step_end - step_start).count(), group.blocked_seconds() - blocked);
  if (state_.progress.total_batches % trainer_.options().log_every_n_steps() == 0)
    state_.logging.send(stragglers_->report(), state_.progress);
}

void FitLoop::run_batch(Batch& batch, int64_t batch_idx) {
  auto& t = trainer_;
  ProfileScope batch_scope(t.profiler(), kTrainingBatchAction);
  state_.current_batch_size = batch.batch_size();
  // Step metrics go to the loggers at every log_every_n_steps-th stepped batch.
  const bool steps = !module_.automatic_optimization() || ends_window(batch_idx);
  state_.logging_batch = steps && (state_.progress.stepped_batches + 1) % t.options().log_every_n_steps() == 0;
  call_hook(t, module_, "on_train_batch_start", &Callback::on_train_batch_start, &TrainModule::on_train_batch_start,
            batch, batch_idx);
  torch::Tensor loss;
  if (module_.automatic_optimization()) {
    automatic_step(batch, batch_idx, steps, loss);
  } else {
    loss = training_step(batch, batch_idx);
  }
  ++state_.progress.epoch_batches;
  ++state_.progress.total_batches;
  if (steps) ++state_.progress.stepped_batches;
  call_hook(t, module_, "on_train_batch_end", &Callback::on_train_batch_end, &TrainModule::on_train_batch_end, loss,
            batch, batch_idx);
  if (state_.logging_batch) log_step();
  state_.logging_batch = false;
}

torch::Tensor FitLoop::training_step(Batch& batch, int64_t batch_idx) {
  auto* profiler = trainer_.profiler();
  torch::Tensor loss;
  {
    const auto autocast = trainer_.precision().forward_context();
    ProfileScope scope(profiler, detail::module_action(profiler, module_, "training_step"));
    // The step's values wait, and are synced in one collective when it returns.
    const Swapped<GatherFn> waiting(state_.logging.sync_at_log, nullptr);
    loss = module_.training_step(batch, batch_idx);
  }
  state_.logging.sync_step_values(state_.logging.train_metrics, state_.logging.sync_at_log, profiler);
  return loss;
}

void FitLoop::automatic_step(Batch& batch, int64_t batch_idx, bool boundary, torch::Tensor& loss) {
  auto& t = trainer_;
  const int64_t accumulate = t.accumulate_grad_batches();
  loss = training_step(batch, batch_idx);
  const bool skipped = !loss.defined();
  ARC_CHECK(skipped || loss.numel() == 1, "training_step must return the scalar loss to minimise (or an undefined ",
            "tensor to skip the batch), got a tensor of shape ", detail::str(loss.sizes()),
            "; return a scalar, or call set_automatic_optimization(false) to optimize by hand");
  if (batch_idx % accumulate == 0)
    for (auto& config : state_.optimizers) t.zero_grad(*config.optimizer, batch_idx);
  if (!skipped) {
    t.strategy().set_gradient_sync(boundary);
    t.backward(module_, accumulate > 1 ? loss / static_cast<double>(accumulate) : loss);
    t.strategy().set_gradient_sync(true);
    loss = loss.detach();
  }
  if (boundary && !t.strategy().agree_on_skip(skipped)) optimizer_step(batch_idx);
}

bool FitLoop::ends_window(int64_t batch_idx) const {
  return (batch_idx + 1) % trainer_.accumulate_grad_batches() == 0 || batch_idx + 1 == state_.num_training_batches;
}

void FitLoop::optimizer_step(int64_t batch_idx) {
  // configure_optimizers allows automatic optimization exactly one optimizer, as Lightning's.
  const int64_t before = state_.progress.global_step;
  TrainerOptimizer optimizer(trainer_, *state_.optimizers.front().optimizer);
  module_.optimizer_step(state_.progress.current_epoch, batch_idx, optimizer);
  // A step the module's optimizer_step left out leaves the step-interval schedulers too.
  if (state_.progress.global_step != before) step_schedulers(Interval::step);
}

void FitLoop::step_schedulers(Interval interval) {
  auto& t = trainer_;
  const int64_t count = interval == Interval::step ? state_.progress.global_step : state_.progress.current_epoch + 1;
  for (auto& config : state_.optimizers) {
    if (!config.lr_scheduler || config.lr_scheduler->interval != interval) continue;
    auto& scheduler = *config.lr_scheduler;
    if (count % scheduler.frequency != 0) continue;
    std::optional<double> metric;
    if (!scheduler.monitor.empty()) {
      // Rank 0's value: a value logged without sync_dist differs by rank, and so would the ranks'
      // learning rates, whose weights would then part.
      const auto metrics = t.agreed_metrics();
      const auto found = metrics.find(scheduler.monitor);
      ARC_CHECK(found != metrics.end(), "the scheduler monitors '", scheduler.monitor,
                "', which was not logged; available metrics: ", metric_names(metrics, scheduler.monitor),
                ". Log it with on_epoch=true, or change `monitor`");
      metric = found->second;
    }
    module_.lr_scheduler_step(*scheduler.scheduler, metric);
  }
}

bool FitLoop::validation_wanted() const {
  const auto& interval = trainer_.options().val_check_interval();
  return interval.is_time && has_validation() &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - last_validation_).count() >= interval.value;
}

bool FitLoop::validation_due(int64_t batch_idx) const {
  if (!has_validation()) return false;
  const auto& o = trainer_.options();
  // By the clock: when some rank's interval ran out (the ranks' vote, so all validate together).
  if (o.val_check_interval().is_time) return agreed_.validation > state_.progress.validation_runs;
  // check_val_every_n_epoch=null: every val_check_interval batches of the fit, across epochs.
  if (!o.check_val_every_n_epoch()) return state_.progress.total_batches % val_every_ == 0;
  if (!validates_this_epoch()) return false;
  const bool last = batch_idx + 1 == state_.num_training_batches;
  if (last && o.val_check_interval().is_fraction && o.val_check_interval().value == 1.0) return true;
  return (batch_idx + 1) % val_every_ == 0;
}

// Lightning's _should_check_val_epoch: every check_val_every_n_epoch-th epoch, or every epoch when it
// is null.
bool FitLoop::validates_this_epoch() const {
  const auto& every = trainer_.options().check_val_every_n_epoch();
  return has_validation() && (!every || (state_.progress.current_epoch + 1) % *every == 0);
}

void FitLoop::validate() {
  auto& t = trainer_;
  const int64_t reload = t.options().reload_dataloaders_every_n_epochs();
  if (reload > 0 && state_.progress.current_epoch - val_loaded_epoch_ >= reload) load_val();
  EvaluationLoop(t, state_, module_, Stage::validate).run(val_, val_batches_);
  last_validation_ = std::chrono::steady_clock::now();
}

void FitLoop::log_step() {
  ProfileScope scope(trainer_.profiler(), "[LoggerConnector].log_step");
  state_.logging.send(state_.logging.train_metrics.step_logger_metrics(), state_.progress);
}

}  // namespace arc
