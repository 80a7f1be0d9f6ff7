// TensorBoardLogger.
#include <arc/loggers/tensorboard_logger.h>

#include <arc/base/detail/crc32c.h>
#include <arc/base/detail/host.h>
#include <arc/base/error.h>

#include "loggers/tensorboard.pb.h"

#include <unistd.h>
#include <chrono>

namespace arc {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TensorBoardLogger::TensorBoardLogger(const std::string& save_dir, std::string name, int64_t version)
    : FolderLogger(save_dir, std::move(name), version) {}

// The events file is opened at the first record: only rank 0 writes one.
void TensorBoardLogger::open() {
  path_ = folder(sub_dir_) + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now_seconds())) + "." +
          host_name() + "." + std::to_string(getpid());
  out_.open(path_, std::ios::binary);
  ARC_CHECK(out_.good(), "cannot open '", path_, "' for writing; make save_dir writable or choose another");
  tensorboard::Event header;
  header.set_wall_time(now_seconds());
  header.set_file_version("brain.Event:2");
  write_record(header.SerializeAsString());
}

void TensorBoardLogger::write_record(const std::string& data) {
  if (!out_.is_open()) open();
  const uint64_t length = data.size();
  char framed[12];
  for (int i = 0; i < 8; ++i) framed[i] = static_cast<char>((length >> (8 * i)) & 0xFF);
  const uint32_t length_crc = masked_crc32c(framed, 8);
  for (int i = 0; i < 4; ++i) framed[8 + i] = static_cast<char>((length_crc >> (8 * i)) & 0xFF);
  out_.write(framed, 12);
  out_.write(data.data(), static_cast<std::streamsize>(data.size()));
  const uint32_t data_crc = masked_crc32c(data.data(), data.size());
  char tail[4];
  for (int i = 0; i < 4; ++i) tail[i] = static_cast<char>((data_crc >> (8 * i)) & 0xFF);
  out_.write(tail, 4);
}

void TensorBoardLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  tensorboard::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  auto* summary = event.mutable_summary();
  for (const auto& [tag, value] : prefixed(metrics)) {
    auto* entry = summary->add_value();
    entry->set_tag(tag);
    entry->set_simple_value(static_cast<float>(value));
  }
  if (summary->value_size() > 0) write_record(event.SerializeAsString());
}

void TensorBoardLogger::save() { out_.flush(); }

}  // namespace arc
