// Learning-rate schedulers.
#include <arc/core/lr_scheduler.h>

#include <arc/base/detail/json_integer.h>
#include <arc/base/error.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

namespace arc {
namespace {

// "[3, 1, 5]": milestones as errors show them.
std::string listed(const std::vector<int64_t>& values) {
  std::vector<std::string> items;
  for (const auto v : values) items.push_back(std::to_string(v));
  return "[" + join(items) + "]";
}

// From `from` at progress 0 to `to` at progress 1 along half a cosine: PyTorch's cosine annealing.
double cosine_between(double from, double to, double progress) {
  return to + (from - to) * (1 + std::cos(std::acos(-1.0) * progress)) / 2;
}

// Sets a group's momentum: SGD's and RMSprop's momentum, Adam's and AdamW's beta1; false for an
// optimizer that has neither.
bool set_momentum(torch::optim::OptimizerOptions& o, double momentum) {
  if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&o)) {
    sgd->momentum(momentum);
  } else if (auto* rms = dynamic_cast<torch::optim::RMSpropOptions*>(&o)) {
    rms->momentum(momentum);
  } else if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&o)) {
    adam->betas({momentum, std::get<1>(adam->betas())});
  } else if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&o)) {
    adamw->betas({momentum, std::get<1>(adamw->betas())});
  } else {
    return false;
  }
  return true;
}

// `optimizer` with every group's rate set to `lr` (CyclicLR starts its groups there).
torch::optim::Optimizer& at_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
  return optimizer;
}

}  // namespace

LRScheduler::LRScheduler(torch::optim::Optimizer& optimizer) : optimizer_(optimizer) {
  for (const auto& group : optimizer_.param_groups()) base_lrs_.push_back(group.options().get_lr());
}

void LRScheduler::step(std::optional<double>) {
  ++last_epoch_;
  apply();
}

void LRScheduler::apply() {
  std::vector<double> lrs;
  for (const double base : base_lrs_) lrs.push_back(lr_at(base, last_epoch_));
  set_lrs(lrs);
}

void LRScheduler::set_lrs(const std::vector<double>& lrs) {
  auto& groups = optimizer_.param_groups();
  for (size_t i = 0; i < groups.size() && i < lrs.size(); ++i) groups[i].options().set_lr(lrs[i]);
}

std::vector<double> LRScheduler::last_lr() const {
  std::vector<double> out;
  for (const auto& group : optimizer_.param_groups()) out.push_back(group.options().get_lr());
  return out;
}

nlohmann::json LRScheduler::state_dict() const { return {{"last_epoch", last_epoch_}, {"base_lrs", base_lrs_}}; }

void LRScheduler::load_state_dict(const nlohmann::json& state) {
  last_epoch_ = detail::json_integer(state.at("last_epoch"), "last_epoch", -1);
  base_lrs_ = state.at("base_lrs").get<std::vector<double>>();
  apply();
}

StepLR::StepLR(torch::optim::Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  ARC_CHECK(step_size >= 1, "StepLR step_size must be >= 1, got ", step_size);
  apply();
}

double StepLR::lr_at(double base, int64_t epoch) const {
  return base * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

MultiStepLR::MultiStepLR(torch::optim::Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  ARC_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()), "MultiStepLR milestones must be increasing, got ",
            listed(milestones_), "; sort them");
  apply();
}

double MultiStepLR::lr_at(double base, int64_t epoch) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  return base * std::pow(gamma_, static_cast<double>(passed));
}

ExponentialLR::ExponentialLR(torch::optim::Optimizer& optimizer, double gamma) : LRScheduler(optimizer), gamma_(gamma) {
  apply();
}

double ExponentialLR::lr_at(double base, int64_t epoch) const {
  return base * std::pow(gamma_, static_cast<double>(epoch));
}

CosineAnnealingLR::CosineAnnealingLR(torch::optim::Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  ARC_CHECK(t_max >= 1, "CosineAnnealingLR t_max must be >= 1, got ", t_max);
  apply();
}

double CosineAnnealingLR::lr_at(double base, int64_t epoch) const {
  return cosine_between(base, eta_min_, static_cast<double>(epoch) / static_cast<double>(t_max_));
}

LinearWarmup::LinearWarmup(torch::optim::Optimizer& optimizer, int64_t total_iters, double start_factor,
                           double end_factor)
    : LRScheduler(optimizer), total_iters_(total_iters), start_factor_(start_factor), end_factor_(end_factor) {
  ARC_CHECK(total_iters >= 1, "LinearWarmup total_iters must be >= 1, got ", total_iters);
  ARC_CHECK(start_factor > 0 && start_factor <= 1, "LinearWarmup start_factor must be in (0, 1], got ", start_factor);
  apply();
}

double LinearWarmup::lr_at(double base, int64_t epoch) const {
  const double progress = static_cast<double>(std::min(epoch, total_iters_)) / static_cast<double>(total_iters_);
  return base * (start_factor_ + (end_factor_ - start_factor_) * progress);
}

LambdaLR::LambdaLR(torch::optim::Optimizer& optimizer, std::function<double(int64_t)> lr_lambda)
    : LRScheduler(optimizer), lr_lambda_(std::move(lr_lambda)) {
  ARC_CHECK(static_cast<bool>(lr_lambda_), "LambdaLR needs a function of the step, got an empty std::function");
  apply();
}

double LambdaLR::lr_at(double base, int64_t epoch) const { return base * lr_lambda_(epoch); }

PolynomialLR::PolynomialLR(torch::optim::Optimizer& optimizer, int64_t total_iters, double power)
    : LRScheduler(optimizer), total_iters_(total_iters), power_(power) {
  ARC_CHECK(total_iters >= 1, "PolynomialLR total_iters must be >= 1, got ", total_iters);
  apply();
}

double PolynomialLR::lr_at(double base, int64_t epoch) const {
  const double done = static_cast<double>(std::min(epoch, total_iters_)) / static_cast<double>(total_iters_);
  return base * std::pow(1.0 - done, power_);
}

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(torch::optim::Optimizer& optimizer, int64_t t_0,
                                                         int64_t t_mult, double eta_min)
    : LRScheduler(optimizer), t_0_(t_0), t_mult_(t_mult), eta_min_(eta_min) {
  ARC_CHECK(t_0 >= 1, "CosineAnnealingWarmRestarts t_0 must be >= 1, got ", t_0);
  ARC_CHECK(t_mult >= 1, "CosineAnnealingWarmRestarts t_mult must be >= 1, got ", t_mult);
  apply();
}

double CosineAnnealingWarmRestarts::lr_at(double base, int64_t epoch) const {
  // The cycle the step falls in, counted in integers: cycles of t_0, t_0·t_mult, ...
  int64_t start = 0;
  int64_t length = t_0_;
  while (epoch >= start + length) {
    start += length;
    length *= t_mult_;
  }
  return cosine_between(base, eta_min_, static_cast<double>(epoch - start) / static_cast<double>(length));
}

MomentumCyclingLR::MomentumCyclingLR(torch::optim::Optimizer& optimizer, bool cycle_momentum, std::string name)
    : LRScheduler(optimizer), cycle_momentum_(cycle_momentum), name_(std::move(name)) {}

void MomentumCyclingLR::step(std::optional<double>) {
  check_step();
  ++last_epoch_;
  apply_cycle();
}

void MomentumCyclingLR::load_state_dict(const nlohmann::json& state) {
  LRScheduler::load_state_dict(state);
  apply_cycle();
}

void MomentumCyclingLR::apply_cycle() {
  if (cycle_momentum_) {
    const double momentum = momentum_at(last_epoch_);
    for (auto& group : optimizer_.param_groups())
      ARC_CHECK(set_momentum(group.options(), momentum), name_, " cycle_momentum needs an optimizer with ",
                "momentum or beta1 (SGD, RMSprop, Adam, AdamW); set cycle_momentum to false");
  }
  apply();
}

OneCycleLR::OneCycleLR(torch::optim::Optimizer& optimizer, double max_lr, int64_t total_steps, Options options)
    : MomentumCyclingLR(optimizer, options.cycle_momentum(), "OneCycleLR"),
      total_steps_(total_steps),
      options_(options) {
  ARC_CHECK(total_steps >= 1, "OneCycleLR total_steps must be >= 1, got ", total_steps,
            "; trainer().estimated_stepping_batches() gives a fit's");
  ARC_CHECK(options.pct_start() >= 0 && options.pct_start() <= 1, "OneCycleLR pct_start must be in [0, 1], got ",
            options.pct_start());
  const double initial = max_lr / options.div_factor();
  const double min_lr = initial / options.final_div_factor();
  const double up = options.pct_start() * static_cast<double>(total_steps);
  const double last = static_cast<double>(total_steps - 1);
  const double high = options.max_momentum(), low = options.base_momentum();
  if (options.three_phase())
    phases_ = {{up - 1, initial, max_lr, high, low},
               {2 * up - 2, max_lr, initial, low, high},
               {last, initial, min_lr, high, high}};
  else
    phases_ = {{up - 1, initial, max_lr, high, low}, {last, max_lr, min_lr, low, high}};
  double start = 0;
  for (const auto& phase : phases_) {
    ARC_CHECK(phase.end_step != start, "OneCycleLR: pct_start=", options.pct_start(), " of total_steps=", total_steps,
              " leaves a phase of no length (PyTorch divides by zero there); change pct_start or total_steps");
    start = phase.end_step;
  }
  apply_cycle();
}

std::pair<const OneCycleLR::Phase*, double> OneCycleLR::locate(int64_t epoch) const {
  // The first phase that has not ended by `epoch`; the last one past total_steps - 1.
  const double step = static_cast<double>(epoch);
  double start = 0;
  size_t i = 0;
  for (; i + 1 < phases_.size() && step > phases_[i].end_step; ++i) start = phases_[i].end_step;
  return {&phases_[i], (step - start) / (phases_[i].end_step - start)};
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  return options_.cosine() ? cosine_between(start, end, pct) : (end - start) * pct + start;
}

double OneCycleLR::lr_at(double, int64_t epoch) const {
  const auto [phase, pct] = locate(epoch);
  return anneal(phase->start_lr, phase->end_lr, pct);
}

double OneCycleLR::momentum_at(int64_t epoch) const {
  const auto [phase, pct] = locate(epoch);
  return anneal(phase->start_momentum, phase->end_momentum, pct);
}

void OneCycleLR::check_step() const {
  ARC_CHECK(last_epoch_ + 1 <= total_steps_, "OneCycleLR stepped ", last_epoch_ + 1,
            " times, past its total_steps=", total_steps_,
            "; make total_steps the number of optimizer steps (trainer().estimated_stepping_batches())");
}

ConstantLR::ConstantLR(torch::optim::Optimizer& optimizer, double factor, int64_t total_iters)
    : LRScheduler(optimizer), factor_(factor), total_iters_(total_iters) {
  ARC_CHECK(factor > 0 && factor <= 1, "ConstantLR factor must be in (0, 1], got ", factor);
  ARC_CHECK(total_iters >= 0, "ConstantLR total_iters must be >= 0, got ", total_iters);
  apply();
}

// PyTorch multiplies by factor at step 0 and by 1 / factor at total_iters (never with total_iters 0).
double ConstantLR::lr_at(double base, int64_t epoch) const {
  return total_iters_ > 0 && epoch >= total_iters_ ? base * factor_ * (1.0 / factor_) : base * factor_;
}

MultiplicativeLR::MultiplicativeLR(torch::optim::Optimizer& optimizer, std::function<double(int64_t)> lr_lambda)
    : LRScheduler(optimizer), lr_lambda_(std::move(lr_lambda)) {
  ARC_CHECK(static_cast<bool>(lr_lambda_), "MultiplicativeLR needs a function of the step, got an empty std::function");
}

void MultiplicativeLR::step(std::optional<double>) {
  ++last_epoch_;
  auto lrs = last_lr();
  for (auto& lr : lrs) lr *= lr_lambda_(last_epoch_);
  set_lrs(lrs);
}

double MultiplicativeLR::lr_at(double base, int64_t epoch) const {
  double lr = base;
  for (int64_t e = 1; e <= epoch; ++e) lr *= lr_lambda_(e);
  return lr;
}

CyclicLR::CyclicLR(torch::optim::Optimizer& optimizer, double base_lr, double max_lr, Options options)
    : MomentumCyclingLR(at_rate(optimizer, base_lr), options.cycle_momentum(), "CyclicLR"),
      max_lr_(max_lr),
      options_(std::move(options)) {
  ARC_CHECK(options_.step_size_up() >= 1, "CyclicLR step_size_up must be >= 1, got ", options_.step_size_up());
  ARC_CHECK(options_.step_size_down() >= 0, "CyclicLR step_size_down must be >= 0 (0: step_size_up), got ",
            options_.step_size_down());
  const auto& mode = options_.mode();
  ARC_CHECK(mode == "triangular" || mode == "triangular2" || mode == "exp_range",
            "CyclicLR mode must be \"triangular\", \"triangular2\" or \"exp_range\", got \"", mode, "\"");
  const auto up = static_cast<double>(options_.step_size_up());
  const auto down = options_.step_size_down() == 0 ? up : static_cast<double>(options_.step_size_down());
  total_size_ = up + down;
  step_ratio_ = up / total_size_;
  apply_cycle();
}

// PyTorch's arithmetic: the cycle, the position x in it, the height's fraction, and the mode's scale
// of the cycle ("triangular2") or of the step ("exp_range").
std::pair<double, double> CyclicLR::position(int64_t epoch) const {
  const auto step = static_cast<double>(epoch);
  const double cycle = std::floor(1 + step / total_size_);
  const double x = 1. + step / total_size_ - cycle;
  const double height = x <= step_ratio_ ? x / step_ratio_ : (x - 1) / (step_ratio_ - 1);
  if (options_.mode() == "triangular2") return {height, 1 / std::pow(2.0, cycle - 1)};
  if (options_.mode() == "exp_range") return {height, std::pow(options_.gamma(), step)};
  return {height, 1.0};
}

double CyclicLR::lr_at(double base, int64_t epoch) const {
  const auto [height, scale] = position(epoch);
  return base + (max_lr_ - base) * height * scale;
}

double CyclicLR::momentum_at(int64_t epoch) const {
  const auto [height, scale] = position(epoch);
  return options_.max_momentum() - (options_.max_momentum() - options_.base_momentum()) * height * scale;
}

ChainedScheduler::ChainedScheduler(torch::optim::Optimizer& optimizer,
                                   std::vector<std::shared_ptr<LRScheduler>> schedulers)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)) {
  ARC_CHECK(!schedulers_.empty(), "ChainedScheduler needs at least one scheduler, got none");
  for (const auto& scheduler : schedulers_)
    ARC_CHECK(scheduler && !scheduler->needs_metric() && dynamic_cast<TorchLRScheduler*>(scheduler.get()) == nullptr,
              "ChainedScheduler takes schedulers whose rate is a function of the step; ReduceLROnPlateau, ",
              "TorchLRScheduler and null ones cannot be chained (step them yourself)");
  // Each was made on the optimizer and changed its rates: start from the rates the first saw.
  base_lrs_ = schedulers_.front()->base_lrs();
  apply();
}

double ChainedScheduler::lr_at(double base, int64_t epoch) const {
  if (base == 0) return 0;
  double lr = base;
  for (const auto& scheduler : schedulers_) lr *= scheduler->lr_at(base, epoch) / base;
  return lr;
}

SequentialLR::SequentialLR(torch::optim::Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  ARC_CHECK(!schedulers_.empty() && milestones_.size() + 1 == schedulers_.size(), "SequentialLR needs ",
            "one milestone fewer than schedulers, got ", schedulers_.size(), " schedulers and ", milestones_.size(),
            " milestones");
  ARC_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()), "SequentialLR milestones must be increasing, got ",
            listed(milestones_), "; sort them");
  // The phases were made on the same optimizer and already changed its rates: start from the
  // rates the first phase saw.
  base_lrs_ = schedulers_.front()->base_lrs();
  apply();
}

double SequentialLR::lr_at(double base, int64_t epoch) const {
  const auto phase =
      static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin());
  const int64_t start = phase == 0 ? 0 : milestones_[phase - 1];
  return schedulers_[phase]->lr_at(base, epoch - start);
}

ReduceLROnPlateau::ReduceLROnPlateau(torch::optim::Optimizer& optimizer, Mode mode, double factor, int64_t patience,
                                     double threshold, int64_t cooldown, double min_lr)
    : LRScheduler(optimizer),
      mode_(mode),
      factor_(factor),
      patience_(patience),
      threshold_(threshold),
      cooldown_(cooldown),
      min_lr_(min_lr) {
  ARC_CHECK(factor > 0 && factor < 1, "ReduceLROnPlateau factor must be in (0, 1), got ", factor);
  ARC_CHECK(patience >= 0, "ReduceLROnPlateau patience must be >= 0, got ", patience);
}

double ReduceLROnPlateau::lr_at(double base, int64_t) const { return base; }

bool ReduceLROnPlateau::improves(double metric) const {
  if (!best_) return true;
  return mode_ == Mode::min ? metric < *best_ * (1 - threshold_) : metric > *best_ * (1 + threshold_);
}

void ReduceLROnPlateau::step(std::optional<double> metric) {
  ARC_CHECK(metric.has_value(), "ReduceLROnPlateau needs the monitored metric; set `monitor` in its scheduler config");
  ++last_epoch_;
  if (improves(*metric)) {
    best_ = *metric;
    bad_epochs_ = 0;
  } else {
    ++bad_epochs_;
  }
  if (cooldown_left_ > 0) {
    --cooldown_left_;
    bad_epochs_ = 0;
  }
  if (bad_epochs_ > patience_) {
    std::vector<double> lrs = last_lr();
    for (double& lr : lrs) lr = std::max(lr * factor_, min_lr_);
    set_lrs(lrs);
    cooldown_left_ = cooldown_;
    bad_epochs_ = 0;
  }
}

nlohmann::json ReduceLROnPlateau::state_dict() const {
  auto state = LRScheduler::state_dict();
  state["best"] = best_ ? nlohmann::json(*best_) : nlohmann::json(nullptr);
  state["bad_epochs"] = bad_epochs_;
  state["cooldown_left"] = cooldown_left_;
  state["lrs"] = last_lr();
  return state;
}

void ReduceLROnPlateau::load_state_dict(const nlohmann::json& state) {
  last_epoch_ = detail::json_integer(state.at("last_epoch"), "last_epoch", -1);
  base_lrs_ = state.at("base_lrs").get<std::vector<double>>();
  best_ = state.at("best").is_null() ? std::nullopt : std::optional<double>(state.at("best").get<double>());
  bad_epochs_ = detail::json_integer(state.at("bad_epochs"), "bad_epochs");
  cooldown_left_ = detail::json_integer(state.at("cooldown_left"), "cooldown_left");
  set_lrs(state.at("lrs").get<std::vector<double>>());
}

TorchLRScheduler::TorchLRScheduler(torch::optim::Optimizer& optimizer,
                                   std::shared_ptr<torch::optim::LRScheduler> scheduler)
    : LRScheduler(optimizer), scheduler_(std::move(scheduler)) {
  ARC_CHECK(scheduler_ != nullptr, "TorchLRScheduler needs a LibTorch scheduler, got none");
}

void TorchLRScheduler::step(std::optional<double>) {
  ++last_epoch_;
  scheduler_->step();
}

double TorchLRScheduler::lr_at(double, int64_t) const {
  ARC_FAIL("a LibTorch scheduler gives its rate only by stepping, so it cannot be a SequentialLR phase; ",
           "chain Arclight's schedulers instead");
}

nlohmann::json TorchLRScheduler::state_dict() const {
  auto state = LRScheduler::state_dict();
  state["lrs"] = last_lr();
  return state;
}

void TorchLRScheduler::load_state_dict(const nlohmann::json& state) {
  const auto steps = detail::json_integer(state.at("last_epoch"), "last_epoch", -1);
  ARC_CHECK(steps >= last_epoch_, "a LibTorch scheduler cannot step back from step ", last_epoch_, " to ", steps,
            "; load the checkpoint into a newly made one");
  while (last_epoch_ < steps) step(std::nullopt);
  base_lrs_ = state.at("base_lrs").get<std::vector<double>>();
  set_lrs(state.at("lrs").get<std::vector<double>>());
}

}  // namespace arc
