// RunReport, and the parameter digest of its RESULT line.
#include <arc/cli/detail/run_report.h>

#include <arc/base/sha256.h>
#include <arc/core/trainer.h>
#include <arc/strategies/strategy.h>

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <sstream>

namespace arc::cli {
namespace {

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// Process start in Unix seconds: start ticks since boot (/proc/self/stat) against the time since
// boot now (CLOCK_BOOTTIME); /proc/stat's btime is whole seconds and would be up to 1 s off.
double process_start_unix() {
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
  }
  const double started_after_boot = std::stod(field) / static_cast<double>(sysconf(_SC_CLK_TCK));
  timespec since_boot{};
  clock_gettime(CLOCK_BOOTTIME, &since_boot);
  const double now_after_boot = static_cast<double>(since_boot.tv_sec) + static_cast<double>(since_boot.tv_nsec) * 1e-9;
  return unix_now() - (now_after_boot - started_after_boot);
}

}  // namespace

std::string parameter_sha256(const torch::nn::Module& module) {
  Sha256 hash;
  for (const auto& parameter : module.parameters()) {
    const auto values = parameter.detach().to(torch::kCPU, torch::kFloat).contiguous();
    hash.update(values.data_ptr<float>(), static_cast<size_t>(values.numel()) * sizeof(float));
  }
  return hash.hex_digest();
}

double RunReport::command_start_unix() {
  for (const char* name : {"BENCH_T0", "ARC_COMMAND_START"})
    if (const char* t0 = std::getenv(name)) return std::strtod(t0, nullptr);
  return process_start_unix();
}

void RunReport::on_train_epoch_start(Trainer&, TrainModule&) {
  if (!start_) start_ = Clock::now();
}

void RunReport::on_train_batch_end(Trainer&, TrainModule&, const torch::Tensor& loss, Batch& batch, int64_t) {
  samples_ += batch.batch_size();
  if (loss.defined()) losses_.push_back(loss.item<float>());  // also waits for a GPU to finish the step
  step_ends_.push_back(Clock::now());
  if (step_ends_.size() == 1) first_step_unix_ = unix_now();
}

void RunReport::on_fit_end(Trainer& trainer, TrainModule&) {
  const double train_time =
      step_ends_.empty() ? 0.0 : std::chrono::duration<double>(step_ends_.back() - *start_).count();
  const size_t tail = std::min<size_t>(100, losses_.size());
  double last100 = 0;
  for (size_t i = losses_.size() - tail; i < losses_.size(); ++i) last100 += losses_[i];
  if (tail > 0) last100 /= static_cast<double>(tail);
  const auto maxima =
      trainer.strategy().all_reduce(torch::tensor({train_time, first_step_unix_}, torch::kDouble), Reduce::max);
  train_time_s_ = maxima[0].item<double>();
  // The command started with rank 0's process; other ranks started later.
  auto start = torch::tensor({command_start_unix()}, torch::kDouble);
  trainer.strategy().broadcast(start, 0);
  first_step_s_ = maxima[1].item<double>() - start.item<double>();
  loss_last100_ = trainer.strategy().all_reduce(torch::tensor(last100, torch::kDouble), Reduce::mean).item<double>();
}

nlohmann::json RunReport::report(const Trainer& trainer, const TrainModule& module) const {
  const auto samples = static_cast<double>(samples_ * trainer.world_size());
  nlohmann::json out;
  const double train_time = train_time_s_;
  std::vector<double> intervals;
  for (size_t i = 1; i < step_ends_.size(); ++i)
    intervals.push_back(std::chrono::duration<double, std::milli>(step_ends_[i] - step_ends_[i - 1]).count());
  double median = 0, mean = 0;
  if (!intervals.empty()) {
    mean = std::accumulate(intervals.begin(), intervals.end(), 0.0) / static_cast<double>(intervals.size());
    std::vector<double> sorted = intervals;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
    median = sorted[sorted.size() / 2];
  }
  out["train_time_s"] = train_time;
  out["train_sps"] = train_time > 0 ? samples / train_time : 0.0;
  out["median_step_ms"] = median;
  out["mean_step_ms"] = mean;
  // A fit resumed after its last step trains nothing, so it has no first step to time.
  out["t_first_step_s"] = first_step_s_ >= 0 ? nlohmann::json(first_step_s_) : nlohmann::json(nullptr);
  out["train_loss_last100"] = loss_last100_;
  const auto& metrics = trainer.callback_metrics();
  for (const char* name : {"val_loss", "val_acc"}) {
    const auto found = metrics.find(name);
    out[name] = found == metrics.end() ? nlohmann::json(nullptr) : nlohmann::json(found->second);
  }
  out["final_param_sha256"] = parameter_sha256(module);
  out["world_size"] = trainer.world_size();
  out["threads"] = torch::get_num_threads();
  out["steps"] = step_ends_.size();
  return out;
}

}  // namespace arc::cli
