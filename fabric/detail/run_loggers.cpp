// RunLoggers.
#include <arc/fabric/detail/run_loggers.h>

#include <arc/loggers/folder_logger.h>
#include <arc/strategies/strategy.h>

#include <filesystem>
#include <map>

namespace arc::detail {

// The loggers of one folder share the version given to any of them, or else the next free one.
void RunLoggers::agree_on_versions() {
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

void RunLoggers::log_hyperparams(const nlohmann::json& hparams) {
  if (strategy_.is_global_zero())
    for (auto& logger : loggers_) logger->log_hyperparams(hparams);
}

void RunLoggers::finalize(const std::string& status) {
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
