// arc::metrics::Metric: torchmetrics' contract in C++. State tensors that update() accumulates,
// compute() turns into a value (combined over the ranks first), reset() clears.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace arc {

class Collectives;

namespace metrics {

/// Gathers one vector of numbers (of one length on every rank) from every rank, in rank order: a
/// collective every rank calls.
using GatherValues = std::function<std::vector<std::vector<double>>(const std::vector<double>&)>;

/// GatherValues through `group`'s all_gather ("metric sync" in the report of one that times out).
GatherValues gather_values(Collectives& group);

/// How a state combines across ranks: added, concatenated along dim 0 in rank order, or the
/// elementwise minimum or maximum.
enum class StateReduce { sum, cat, min, max };

/// A metric with state, as torchmetrics' Metric. Subclasses add their states in the constructor and
/// accumulate them in their own update(); compute() combines every rank's states (a group set with
/// sync_on) and computes the value from them, leaving this rank's states as they were, so that
/// updates go on after it.
class Metric {
 public:
  virtual ~Metric() = default;
  /// The value over everything updated since the last reset: over the ranks of the group set with
  /// sync_on (every rank of it calls compute, in the same order), else over this rank's updates.
  torch::Tensor compute();
  /// The value over every rank's updates, their states combined through `gather` (null: this
  /// rank's alone); how the Trainer computes a logged metric at the epoch's end.
  torch::Tensor compute(const GatherValues& gather);
  /// The value over the last update alone, on this rank (torchmetrics' forward): what a metric
  /// logged on_step logs.
  torch::Tensor batch_value() const;
  /// Every state back to its initial value.
  void reset();
  /// The ranks whose states compute() combines (null: this rank's alone), for metrics used outside
  /// the Trainer, which computes the metrics a module logs over every rank itself.
  void sync_on(Collectives* group) { group_ = group; }
  /// Whether update() was called since the last reset.
  bool updated() const { return updates_ > 0; }
  /// The metric's class, as torchmetrics names it ("Accuracy").
  virtual std::string name() const = 0;

 protected:
  /// Adds a state that starts as `initial` and combines across ranks by `reduce`; a cat state
  /// starts empty, its rows shaped as `initial`'s (of zero rows). Returns its index.
  size_t add_state(const std::string& name, torch::Tensor initial, StateReduce reduce);
  /// A sum, min or max state, to update in place.
  torch::Tensor& state(size_t index) { return states_[index].value; }
  /// Adds `rows` to a cat state.
  void append(size_t index, const torch::Tensor& rows);
  /// Runs `add`, which adds one batch to the states, on fresh states, keeps them as the batch's
  /// (batch_value), and adds them to the states before; every subclass's update() goes through it.
  /// When `add` throws, the states are as before.
  void add_batch(const std::function<void()>& add);
  /// The value from `states`, in the order they were added (this rank's, or every rank's combined;
  /// cat states concatenated).
  virtual torch::Tensor compute_from(const std::vector<torch::Tensor>& states) const = 0;

 private:
  struct State {
    std::string name;
    torch::Tensor initial;
    StateReduce reduce;
    torch::Tensor value;
    std::vector<torch::Tensor> rows;
  };
  std::vector<torch::Tensor> local_states() const;
  std::vector<torch::Tensor> synced_states(const GatherValues& gather, const std::vector<torch::Tensor>& local) const;

  std::vector<State> states_;
  std::vector<torch::Tensor> last_batch_;
  Collectives* group_ = nullptr;
  int64_t updates_ = 0;
};

}  // namespace metrics
}  // namespace arc
