// RunReport: the figures of WORKLOAD.md §6 for any fit, printed as one `RESULT {json}` line.
#pragma once

#include <arc/core/callback.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <vector>

namespace arc::cli {

/// SHA-256 of all parameters' float32 little-endian bytes, concatenated in order (WORKLOAD.md §6's
/// final_param_sha256).
std::string parameter_sha256(const torch::nn::Module& module);

/// Times the training steps and keeps the losses; report() gives the RESULT fields.
class RunReport : public Callback {
 public:
  std::string state_key() const override { return "RunReport"; }
  void on_train_epoch_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& loss, Batch& batch,
                          int64_t batch_idx) override;
  /// Reduces the per-rank figures (every rank runs this): times are maxima, losses means.
  void on_fit_end(Trainer& trainer, TrainModule& module) override;

  /// train_time_s, train_sps, step times, t_first_step_s, losses, val metrics, parameter digest.
  nlohmann::json report(const Trainer& trainer, const TrainModule& module) const;

  /// When the command started, in Unix seconds: BENCH_T0 if set, else ARC_COMMAND_START (which
  /// the `arc` tool sets as it starts), else this process's start.
  static double command_start_unix();

 private:
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> start_;
  std::vector<Clock::time_point> step_ends_;
  std::vector<float> losses_;
  int64_t samples_ = 0;
  double first_step_unix_ = 0;
  double first_step_s_ = 0;
  double train_time_s_ = 0;
  double loss_last100_ = 0;
};

}  // namespace arc::cli
