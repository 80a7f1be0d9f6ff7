// TensorBoardLogger: real events.out.tfevents.* files — records framed with their length and
// masked CRC32C checksums, holding Event/Summary protobufs — in save_dir/name/version_N.
#pragma once

#include <arc/loggers/folder_logger.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace arc {

/// Writes scalars as TensorBoard summaries; hyper-parameters go to hparams.yaml beside them.
class TensorBoardLogger : public FolderLogger {
 public:
  /// Writes an events file into `save_dir/name/version_N`, N being `version` (< 0: as the Trainer
  /// chooses).
  explicit TensorBoardLogger(const std::string& save_dir, std::string name = "lightning_logs", int64_t version = -1);

  /// The events file being written ("" before the first record).
  const std::string& events_path() const { return path_; }
  /// Lightning's sub_dir: the events file goes into this folder of the version's ("": the version's
  /// own), for instance "train" and "eval" for two loggers whose runs TensorBoard shows side by side.
  void set_sub_dir(std::string sub_dir) { sub_dir_ = std::move(sub_dir); }
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  void save() override;

 private:
  void open();
  void write_record(const std::string& data);

  std::string sub_dir_;
  std::string path_;
  std::ofstream out_;
};

}  // namespace arc
