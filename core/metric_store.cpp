// MetricStore: step values, epoch aggregation and Lightning's metric names.
#include <arc/core/metric_store.h>

#include <arc/core/error.h>

#include <algorithm>

namespace arc {

void MetricStore::log(const std::string& name, const torch::Tensor& value, const LogOptions& options, bool training,
                      int64_t batch_size) {
  ARC_CHECK(value.numel() == 1, "log('", name, "') needs a single value, got a tensor of shape ", value.sizes());
  auto& entry = entries_[name];
  entry.on_step = options.on_step.value_or(training);
  entry.on_epoch = options.on_epoch.value_or(!training);
  entry.prog_bar = options.prog_bar;
  entry.logger = options.logger;
  entry.reduce = options.reduce;
  const torch::Tensor detached = value.detach();
  if (entry.on_step) entry.step_value = detached;
  if (!entry.on_epoch) return;
  const double v = detached.item<double>();
  const double weight = static_cast<double>(options.batch_size.value_or(std::max<int64_t>(batch_size, 1)));
  entry.weighted_sum += entry.reduce == Reduce::mean ? v * weight : v;
  entry.weight += weight;
  if (entry.count == 0) {
    entry.extreme = v;
  } else if (entry.reduce == Reduce::max) {
    entry.extreme = std::max(entry.extreme, v);
  } else if (entry.reduce == Reduce::min) {
    entry.extreme = std::min(entry.extreme, v);
  }
  ++entry.count;
}

std::string MetricStore::step_name(const std::string& name, const Entry& entry) {
  return entry.on_epoch ? name + "_step" : name;
}

std::string MetricStore::epoch_name(const std::string& name, const Entry& entry) {
  return entry.on_step ? name + "_epoch" : name;
}

double MetricStore::aggregate(const Entry& entry) {
  switch (entry.reduce) {
    case Reduce::mean:
      return entry.weighted_sum / entry.weight;
    case Reduce::sum:
      return entry.weighted_sum;
    case Reduce::max:
    case Reduce::min:
      return entry.extreme;
  }
  return entry.weighted_sum;
}

Metrics MetricStore::step_logger_metrics() const {
  Metrics out;
  for (const auto& [name, entry] : entries_)
    if (entry.logger && entry.on_step && entry.step_value.defined())
      out[step_name(name, entry)] = entry.step_value.item<double>();
  return out;
}

Metrics MetricStore::prog_bar_metrics() const {
  Metrics out;
  for (const auto& [name, entry] : entries_) {
    if (!entry.prog_bar) continue;
    if (entry.on_step && entry.step_value.defined()) {
      out[name] = entry.step_value.item<double>();
    } else if (entry.epoch_value) {
      out[name] = *entry.epoch_value;
    }
  }
  return out;
}

Metrics MetricStore::callback_metrics() const {
  Metrics out;
  for (const auto& [name, entry] : entries_) {
    if (entry.on_step && entry.step_value.defined()) {
      out[step_name(name, entry)] = entry.step_value.item<double>();
      out[name] = out[step_name(name, entry)];
    }
    if (entry.epoch_value) {
      out[epoch_name(name, entry)] = *entry.epoch_value;
      out[name] = *entry.epoch_value;
    }
  }
  return out;
}

Metrics MetricStore::end_epoch() {
  Metrics out;
  for (auto& [name, entry] : entries_) {
    if (!entry.on_epoch || entry.count == 0) continue;
    entry.epoch_value = aggregate(entry);
    if (entry.logger) out[epoch_name(name, entry)] = *entry.epoch_value;
    entry.weighted_sum = entry.weight = entry.extreme = 0;
    entry.count = 0;
  }
  return out;
}

}  // namespace arc
