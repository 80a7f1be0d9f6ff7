// LoggerConnector.
#include <arc/core/detail/logger_connector.h>

#include <arc/core/trainer.h>
#include <arc/loggers/folder_logger.h>
#include <arc/profilers/profiler.h>
#include <arc/strategies/strategy.h>

#include <torch/torch.h>

#include <filesystem>

namespace arc::detail {

const Metrics& LoggerConnector::callback_metrics() const {
  // Step values are read lazily: converting them every step would cost a sync per metric.
  for (const auto& [name, value] : train_metrics.callback_metrics()) callback_metrics_[name] = value;
  for (const auto& [name, value] : eval_metrics.callback_metrics()) callback_metrics_[name] = value;
  return callback_metrics_;
}

Metrics LoggerConnector::progress_bar_metrics() const {
  auto metrics = eval_metrics.prog_bar_metrics();
  for (const auto& [name, value] : train_metrics.prog_bar_metrics()) metrics[name] = value;
  return metrics;
}

void LoggerConnector::send(const Metrics& metrics, const Progress& progress, std::optional<int64_t> step) {
  if (metrics.empty() || !strategy_.is_global_zero()) return;
  Metrics with_epoch = metrics;
  with_epoch["epoch"] = static_cast<double>(progress.current_epoch);
  for (auto& logger : loggers_)
    logger->log_metrics(with_epoch, step.value_or(held_step.value_or(progress.stepped_batches)));
  for (const auto& [name, value] : with_epoch) logged_metrics_[name] = value;
}

GatherFn LoggerConnector::gather() const {
  auto* group = strategy_.collectives();
  if (group == nullptr || group->world_size() == 1) return nullptr;
  return [group](const std::vector<double>& values) {
    const auto local = torch::tensor(values, torch::kDouble);
    const CollectiveName name("metric sync");
    std::vector<std::vector<double>> out;
    for (const auto& rank : group->all_gather(local)) {
      const double* data = rank.data_ptr<double>();
      out.emplace_back(data, data + rank.numel());
    }
    return out;
  };
}

void LoggerConnector::sync_step_values(MetricStore& store, const GatherFn& gather, Profiler* profiler) {
  if (!gather || !store.has_unsynced_step_values()) return;
  ProfileScope scope(profiler, "[LoggerConnector].sync_step_values");
  store.sync_step_values(gather);
}

// The loggers of one folder share the version given to any of them, or else the next free one.
void LoggerConnector::agree_on_versions() {
  nlohmann::json versions = nlohmann::json::array();
  if (strategy_.is_global_zero()) {
    std::map<std::string, int64_t> chosen;
    for (const auto& logger : loggers_)
      if (logger->version_fixed()) chosen.emplace(logger->versions_folder(), logger->version_number());
    for (const auto& logger : loggers_) {
      const std::string folder = logger->versions_folder();
      if (!folder.empty() && !logger->version_fixed()) {
        auto [entry, inserted] = chosen.emplace(folder, 0);
        if (inserted) entry->second = claim_next_version(folder);
        logger->set_version_number(entry->second);
      }
      versions.push_back(logger->version_number());
    }
  }
  versions = nlohmann::json::parse(strategy_.broadcast(versions.dump()));
  for (size_t i = 0; i < loggers_.size(); ++i)
    if (!loggers_[i]->versions_folder().empty()) loggers_[i]->set_version_number(versions.at(i).get<int64_t>());
}

void LoggerConnector::log_hyperparams(const nlohmann::json& hparams) {
  if (strategy_.is_global_zero())
    for (auto& logger : loggers_) logger->log_hyperparams(hparams);
}

void LoggerConnector::finalize(const std::string& status) {
  if (!strategy_.is_global_zero()) return;
  for (auto& logger : loggers_) logger->finalize(status);
  // A run that failed before writing anything (a checkpoint path that does not exist, say) leaves
  // no empty version folder behind, as Lightning's, whose loggers make theirs on first use. (The
  // versions were agreed when the Trainer was made, so log_dir() claims nothing here.)
  std::error_code not_empty;
  if (status == "failed")
    for (const auto& logger : loggers_)
      if (!logger->versions_folder().empty()) std::filesystem::remove(logger->log_dir(), not_empty);
}

}  // namespace arc::detail
