// Learning-rate schedulers over any torch::optim optimizer (LibTorch 1.13 ships only StepLR).
// Closed forms of PyTorch's schedulers: the rate at step e depends only on e and the base rate.
#pragma once

#include <arc/base/arg.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torch::optim {
class Optimizer;
class LRScheduler;
}  // namespace torch::optim

namespace arc {

/// Sets the learning rate of every parameter group of an optimizer, step by step.
class LRScheduler {
 public:
  /// Schedules `optimizer`, whose groups' rates now are the base rates.
  explicit LRScheduler(torch::optim::Optimizer& optimizer);
  virtual ~LRScheduler() = default;

  /// Advances one step (an epoch or a batch, as configured); `metric` feeds ReduceLROnPlateau.
  virtual void step(std::optional<double> metric = std::nullopt);
  /// The rates of the parameter groups after the last step.
  std::vector<double> last_lr() const;
  /// The steps taken so far (PyTorch's last_epoch, whether it steps by epoch or by batch).
  int64_t last_epoch() const { return last_epoch_; }
  /// The rates the groups had when the scheduler was made.
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  /// Whether step() needs a monitored metric.
  virtual bool needs_metric() const { return false; }

  /// What a checkpoint keeps of the scheduler: its step count and base rates, and what a subclass
  /// adds.
  virtual nlohmann::json state_dict() const;
  /// Puts back what state_dict() gave, with the groups' rates at that step.
  virtual void load_state_dict(const nlohmann::json& state);

  /// The rate of a group with base rate `base` at step `epoch`.
  virtual double lr_at(double base, int64_t epoch) const = 0;

 protected:
  /// Applies lr_at(base, last_epoch) to every group.
  void apply();
  /// Sets each parameter group's rate to the one at its index in `lrs`.
  void set_lrs(const std::vector<double>& lrs);

  /// The optimizer whose rates the scheduler sets.
  torch::optim::Optimizer& optimizer_;
  /// The base rate of each parameter group.
  std::vector<double> base_lrs_;
  /// The steps taken so far.
  int64_t last_epoch_ = 0;
};

/// base · gamma^(epoch / step_size).
class StepLR : public LRScheduler {
 public:
  /// The rate times `gamma` every `step_size` steps (at least 1).
  StepLR(torch::optim::Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(double base, int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// base · gamma^(number of milestones <= epoch).
class MultiStepLR : public LRScheduler {
 public:
  /// The rate times `gamma` at each of the `milestones`, which must be increasing.
  MultiStepLR(torch::optim::Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(double base, int64_t epoch) const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

/// base · gamma^epoch.
class ExponentialLR : public LRScheduler {
 public:
  /// The rate times `gamma` at every step.
  ExponentialLR(torch::optim::Optimizer& optimizer, double gamma);
  double lr_at(double base, int64_t epoch) const override;

 private:
  double gamma_;
};

/// eta_min + (base - eta_min) · (1 + cos(pi · epoch / t_max)) / 2.
class CosineAnnealingLR : public LRScheduler {
 public:
  /// From the base rate down to `eta_min` over `t_max` steps (at least 1).
  CosineAnnealingLR(torch::optim::Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);
  double lr_at(double base, int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

/// Linear ramp of the factor from start_factor to end_factor over total_iters steps (PyTorch's
/// LinearLR), the usual warm-up.
class LinearWarmup : public LRScheduler {
 public:
  /// The factor from `start_factor` (in (0, 1]) to `end_factor` over `total_iters` steps (at least 1).
  LinearWarmup(torch::optim::Optimizer& optimizer, int64_t total_iters, double start_factor = 1.0 / 3,
               double end_factor = 1.0);
  double lr_at(double base, int64_t epoch) const override;

 private:
  int64_t total_iters_;
  double start_factor_;
  double end_factor_;
};

/// base · lr_lambda(epoch) (PyTorch's LambdaLR): any schedule a function of the step can express.
/// The function is not part of state_dict(); resume makes the scheduler with the same function.
class LambdaLR : public LRScheduler {
 public:
  /// The base rate times `lr_lambda(step)`; an empty function is an error.
  LambdaLR(torch::optim::Optimizer& optimizer, std::function<double(int64_t)> lr_lambda);
  double lr_at(double base, int64_t epoch) const override;

 private:
  std::function<double(int64_t)> lr_lambda_;
};

/// base · (1 - min(epoch, total_iters) / total_iters)^power (PyTorch's PolynomialLR): decays to 0
/// at total_iters and stays there.
class PolynomialLR : public LRScheduler {
 public:
  /// From the base rate down to 0 over `total_iters` steps (at least 1), along the power `power`.
  PolynomialLR(torch::optim::Optimizer& optimizer, int64_t total_iters = 5, double power = 1.0);
  double lr_at(double base, int64_t epoch) const override;

 private:
  int64_t total_iters_;
  double power_;
};

/// Cosine annealing that restarts at the base rate after t_0 steps, then after t_0 · t_mult,
/// t_0 · t_mult², ... (PyTorch's CosineAnnealingWarmRestarts, SGDR).
class CosineAnnealingWarmRestarts : public LRScheduler {
 public:
  /// Cycles down to `eta_min`, the first of `t_0` steps (at least 1), each next one `t_mult` (at least
  /// 1) times as long.
  CosineAnnealingWarmRestarts(torch::optim::Optimizer& optimizer, int64_t t_0, int64_t t_mult = 1,
                              double eta_min = 0.0);
  double lr_at(double base, int64_t epoch) const override;

 private:
  int64_t t_0_;
  int64_t t_mult_;
  double eta_min_;
};

/// A scheduler whose momentum (SGD's and RMSprop's, Adam's beta1) cycles against its rate, each
/// step: OneCycleLR and CyclicLR.
class MomentumCyclingLR : public LRScheduler {
 public:
  void step(std::optional<double> metric = std::nullopt) override;
  void load_state_dict(const nlohmann::json& state) override;
  /// The momentum (or beta1) at step `epoch`.
  virtual double momentum_at(int64_t epoch) const = 0;

 protected:
  /// Cycles the momentum too if `cycle_momentum` (the optimizer must then be SGD, RMSprop, Adam or
  /// AdamW); `name` names the scheduler in errors.
  MomentumCyclingLR(torch::optim::Optimizer& optimizer, bool cycle_momentum, std::string name);
  /// Sets every group's momentum (with cycle_momentum) and rate for last_epoch; the subclass's
  /// constructor calls it once it can answer lr_at and momentum_at.
  void apply_cycle();
  /// Throws before a step the schedule cannot take (OneCycleLR's past its total_steps).
  virtual void check_step() const {}

 private:
  bool cycle_momentum_;
  std::string name_;
};

/// PyTorch's OneCycleLR: the rate rises from max_lr / div_factor to max_lr over the first pct_start
/// of total_steps, then anneals to max_lr / (div_factor · final_div_factor) (three_phase: back to
/// the start first, then down), by cosine or linearly; momentum (SGD, RMSprop) or Adam's beta1
/// cycles the other way between max_momentum and base_momentum. Stepping past total_steps is an
/// error, as in PyTorch; Trainer::estimated_stepping_batches() gives total_steps for a fit.
class OneCycleLR : public MomentumCyclingLR {
 public:
  /// The cycle's shape, with PyTorch's defaults.
  class Options {
    /// The fraction of total_steps over which the rate rises, in [0, 1].
    ARC_ARG(double, pct_start) = 0.3;
    /// Anneal by cosine (PyTorch's anneal_strategy "cos"); false: linearly ("linear").
    ARC_ARG(bool, cosine) = true;
    /// Cycle the momentum (or beta1) too; the optimizer must then be SGD, RMSprop, Adam or AdamW.
    ARC_ARG(bool, cycle_momentum) = true;
    /// The momentum at the peak rate.
    ARC_ARG(double, base_momentum) = 0.85;
    /// The momentum at the cycle's start and end.
    ARC_ARG(double, max_momentum) = 0.95;
    /// The starting rate is max_lr / div_factor.
    ARC_ARG(double, div_factor) = 25.0;
    /// The final rate is the starting rate / final_div_factor.
    ARC_ARG(double, final_div_factor) = 1e4;
    /// Back down to the starting rate first, then to the final rate (PyTorch's three_phase).
    ARC_ARG(bool, three_phase) = false;
  };
  /// A cycle of `total_steps` optimizer steps (at least 1) that peaks at `max_lr`, shaped by `options`.
  OneCycleLR(torch::optim::Optimizer& optimizer, double max_lr, int64_t total_steps, Options options);
  /// The same with the default Options.
  OneCycleLR(torch::optim::Optimizer& optimizer, double max_lr, int64_t total_steps)
      : OneCycleLR(optimizer, max_lr, total_steps, Options()) {}

  double lr_at(double base, int64_t epoch) const override;
  double momentum_at(int64_t epoch) const override;

 private:
  struct Phase {
    double end_step;
    double start_lr, end_lr, start_momentum, end_momentum;
  };
  /// Where step `epoch` is: the phase and how far through it (0 to 1).
  std::pair<const Phase*, double> locate(int64_t epoch) const;
  double anneal(double start, double end, double pct) const;
  void check_step() const override;

  int64_t total_steps_;
  Options options_;
  std::vector<Phase> phases_;
};

/// Runs schedulers one after another, switching at the milestones (PyTorch's SequentialLR):
/// `SequentialLR(opt, {warmup, cosine}, {100})`. Each phase counts its steps from 0.
class SequentialLR : public LRScheduler {
 public:
  /// `schedulers`, made on `optimizer`, one after another; `milestones`, increasing and one fewer than
  /// the schedulers, are the steps where each next one takes over.
  SequentialLR(torch::optim::Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  double lr_at(double base, int64_t epoch) const override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

/// base · factor for the first total_iters steps, then base (PyTorch's ConstantLR, with its
/// arithmetic: the rate at total_iters is (base · factor) · (1 / factor)).
class ConstantLR : public LRScheduler {
 public:
  /// The base rate times `factor` (in (0, 1]) until step `total_iters` (at least 0).
  ConstantLR(torch::optim::Optimizer& optimizer, double factor = 1.0 / 3, int64_t total_iters = 5);
  double lr_at(double base, int64_t epoch) const override;

 private:
  double factor_;
  int64_t total_iters_;
};

/// The rate times lr_lambda(epoch) at each step (PyTorch's MultiplicativeLR): after e steps,
/// base · lr_lambda(1) · ... · lr_lambda(e), multiplied in that order. Like LambdaLR's, the function
/// is not part of state_dict().
class MultiplicativeLR : public LRScheduler {
 public:
  /// Each step multiplies the rate by `lr_lambda(step)`; an empty function is an error.
  MultiplicativeLR(torch::optim::Optimizer& optimizer, std::function<double(int64_t)> lr_lambda);
  /// Multiplies each group's rate as it is now, as PyTorch's does.
  void step(std::optional<double> metric = std::nullopt) override;
  double lr_at(double base, int64_t epoch) const override;

 private:
  std::function<double(int64_t)> lr_lambda_;
};

/// PyTorch's CyclicLR: the rate goes from base_lr up to max_lr over step_size_up steps and back down
/// over step_size_down, the height of each cycle scaled by its mode ("triangular": 1;
/// "triangular2": halved each cycle; "exp_range": gamma^step); momentum (SGD, RMSprop) or Adam's
/// beta1 cycles the other way between max_momentum and base_momentum. It sets the groups' rates
/// to base_lr when made.
class CyclicLR : public MomentumCyclingLR {
 public:
  /// The cycle's shape, with PyTorch's defaults.
  class Options {
    /// Steps of the rising half (at least 1).
    ARC_ARG(int64_t, step_size_up) = 2000;
    /// Steps of the falling half; 0: step_size_up.
    ARC_ARG(int64_t, step_size_down) = 0;
    /// "triangular", "triangular2" or "exp_range".
    ARC_ARG(std::string, mode) = "triangular";
    /// exp_range's base.
    ARC_ARG(double, gamma) = 1.0;
    /// Cycle the momentum (or beta1) too; the optimizer must then be SGD, RMSprop, Adam or AdamW.
    ARC_ARG(bool, cycle_momentum) = true;
    /// The momentum at max_lr.
    ARC_ARG(double, base_momentum) = 0.8;
    /// The momentum at base_lr.
    ARC_ARG(double, max_momentum) = 0.9;
  };
  /// Cycles every group's rate between `base_lr` and `max_lr`, shaped by `options`.
  CyclicLR(torch::optim::Optimizer& optimizer, double base_lr, double max_lr, Options options);
  /// The same with the default Options.
  CyclicLR(torch::optim::Optimizer& optimizer, double base_lr, double max_lr)
      : CyclicLR(optimizer, base_lr, max_lr, Options()) {}

  double lr_at(double base, int64_t epoch) const override;
  double momentum_at(int64_t epoch) const override;

 private:
  /// How far step `epoch` is up its cycle (0 at base_lr, 1 at max_lr), and the mode's scale.
  std::pair<double, double> position(int64_t epoch) const;

  double max_lr_;
  Options options_;
  double total_size_;
  double step_ratio_;
};

/// Several schedulers at once (PyTorch's ChainedScheduler): the rate is the base rate times each
/// one's factor, lr_at(base, epoch) / base. The schedulers are made on the same optimizer; ones
/// that need a metric or whose rate is known only by stepping (ReduceLROnPlateau, TorchLRScheduler)
/// are an error. As in SequentialLR, only their rates apply: OneCycleLR's and CyclicLR's momentum
/// does not cycle inside.
class ChainedScheduler : public LRScheduler {
 public:
  /// `schedulers`, made on `optimizer`, applied together.
  ChainedScheduler(torch::optim::Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers);
  double lr_at(double base, int64_t epoch) const override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
};

/// Multiplies the rate by `factor` when the monitored metric stops improving for `patience`
/// steps (PyTorch's ReduceLROnPlateau).
class ReduceLROnPlateau : public LRScheduler {
 public:
  /// Whether the metric improves as it falls (min, a loss) or as it rises (max, an accuracy).
  enum class Mode { min, max };
  /// The rate times `factor` (in (0, 1)), not below `min_lr`, once more than `patience` steps in a row
  /// did not improve on the best metric by the fraction `threshold`; the `cooldown` steps after a
  /// reduction do not count.
  ReduceLROnPlateau(torch::optim::Optimizer& optimizer, Mode mode = Mode::min, double factor = 0.1,
                    int64_t patience = 10, double threshold = 1e-4, int64_t cooldown = 0, double min_lr = 0.0);

  void step(std::optional<double> metric) override;
  bool needs_metric() const override { return true; }
  double lr_at(double base, int64_t epoch) const override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

 private:
  bool improves(double metric) const;

  Mode mode_;
  double factor_;
  int64_t patience_;
  double threshold_;
  int64_t cooldown_;
  double min_lr_;
  std::optional<double> best_;
  int64_t bad_epochs_ = 0;
  int64_t cooldown_left_ = 0;
};

/// A LibTorch scheduler used as is (torch::optim::StepLR, or your own torch::optim::LRScheduler
/// subclass): step() steps it. LibTorch's schedulers keep no state but their step count, so a resume
/// steps a freshly made one as many times as the checkpoint's, then puts back the checkpoint's rates.
class TorchLRScheduler : public LRScheduler {
 public:
  /// `scheduler` schedules `optimizer`.
  TorchLRScheduler(torch::optim::Optimizer& optimizer, std::shared_ptr<torch::optim::LRScheduler> scheduler);

  void step(std::optional<double> metric) override;
  /// Throws arc::Error: a LibTorch scheduler's rate is known only by stepping it (it cannot be a
  /// SequentialLR phase).
  double lr_at(double base, int64_t epoch) const override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

 private:
  std::shared_ptr<torch::optim::LRScheduler> scheduler_;
};

}  // namespace arc
