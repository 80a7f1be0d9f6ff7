// RunLoggers: a run's loggers as every rank sees them — rank 0 writes, every rank agrees on their
// versions. arc::Fabric uses it as it is; the Trainer's LoggerConnector builds on it.
#pragma once

#include <arc/loggers/logger.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace arc {

class Strategy;

namespace detail {

class RunLoggers {
 public:
  RunLoggers(std::vector<std::shared_ptr<Logger>>& loggers, Strategy& strategy)
      : loggers_(loggers), strategy_(strategy) {}

  /// Rank 0 picks each logger's version and every rank takes it, as Lightning broadcasts log_dir.
  void agree_on_versions();
  /// On rank 0: the hyper-parameters to every logger; their finalize("success" | "failed").
  void log_hyperparams(const nlohmann::json& hparams);
  void finalize(const std::string& status);

 protected:
  std::vector<std::shared_ptr<Logger>>& loggers_;
  Strategy& strategy_;
};

}  // namespace detail
}  // namespace arc
