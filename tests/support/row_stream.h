// A stream over the rows of tensors, for the tests of iterable datasets: it can report its position
// (a row number) or not, skip by seeking or by reading, fail at a row, and counts the rows it read.
#pragma once

#include "support/tiny_module.h"

#include <arc/arc.h>

#include <torch/torch.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

namespace arc::testing {

struct RowStreamOptions {
  /// state() gives the row number (else null: resume re-reads).
  bool reports_state = true;
  /// skip() moves the row number without reading (else the base class reads and drops).
  bool seeks = true;
  /// next() throws at this row (-1: never).
  int64_t fail_at = -1;
  /// Epoch e starts at row e (mod the rows), so that an epoch's order shows which epoch it is.
  bool rotate_by_epoch = false;
};

class RowStreamDataset : public IterableDataset {
 public:
  explicit RowStreamDataset(std::vector<torch::Tensor> columns, RowStreamOptions options = {})
      : columns_(std::move(columns)), options_(options) {}

  std::unique_ptr<SampleStream> open(int64_t epoch) const override {
    ++opened;
    return std::make_unique<Stream>(*this, options_.rotate_by_epoch ? epoch : 0);
  }
  int64_t rows() const { return columns_.front().size(0); }

  mutable std::atomic<int64_t> rows_read{0};
  mutable std::atomic<int64_t> opened{0};

 private:
  class Stream : public SampleStream {
   public:
    Stream(const RowStreamDataset& data, int64_t offset) : data_(data), offset_(offset) {}
    std::optional<Batch> next() override {
      if (row_ >= data_.rows()) return std::nullopt;
      if (row_ == data_.options_.fail_at) throw std::runtime_error("row stream fails at row " + std::to_string(row_));
      ++data_.rows_read;
      const int64_t index = (row_++ + offset_) % data_.rows();
      Batch sample;
      for (const auto& column : data_.columns_) sample.add(column[index]);
      return sample;
    }
    void skip(int64_t count) override {
      if (!data_.options_.seeks) return SampleStream::skip(count);
      row_ = std::min(data_.rows(), row_ + count);
    }
    nlohmann::json state() const override { return data_.options_.reports_state ? nlohmann::json(row_) : nullptr; }
    void load_state(const nlohmann::json& state) override { row_ = state.get<int64_t>(); }

   private:
    const RowStreamDataset& data_;
    int64_t offset_;
    int64_t row_ = 0;
  };

  std::vector<torch::Tensor> columns_;
  RowStreamOptions options_;
};

/// tiny_tensors(n) as a stream (the rows in order, or rotated by the epoch).
inline DataSource tiny_stream(int64_t n, int64_t batch_size, RowStreamOptions options = {}) {
  return {std::make_shared<RowStreamDataset>(tiny_tensors(n), options), DataLoaderOptions(batch_size)};
}

}  // namespace arc::testing
