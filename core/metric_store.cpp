// MetricStore: step values, epoch aggregation and Lightning's metric names.
#include <arc/core/metric_store.h>

#include <arc/base/detail/json_integer.h>
#include <arc/base/error.h>
#include <arc/metrics/metric.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace arc {

MetricStore::Entry& MetricStore::entry_for(const std::string& name, const LogOptions& options, bool training,
                                           std::optional<int64_t> dataloader_idx) {
  // One loader (every training step): the name as it is, no string built.
  std::string suffix = dataloader_idx ? "/dataloader_idx_" + std::to_string(*dataloader_idx) : std::string();
  auto& entry = suffix.empty() ? entries_[name] : entries_[name + suffix];
  entry.suffix = std::move(suffix);
  entry.on_step = options.on_step().value_or(training);
  entry.on_epoch = options.on_epoch().value_or(!training);
  entry.prog_bar = options.prog_bar();
  entry.logger = options.logger();
  entry.sync_dist = options.sync_dist();
  entry.reduce = options.reduce();
  return entry;
}

void MetricStore::log(const std::string& name, metrics::Metric& metric, const LogOptions& options, bool training,
                      std::optional<int64_t> dataloader_idx) {
  auto& entry = entry_for(name, options, training, dataloader_idx);
  ARC_CHECK(entry.metric == nullptr || entry.metric == &metric, "log('", name, "') was given two metric objects ",
            "in one epoch; log each under its own name");
  entry.metric = &metric;
  entry.sync_dist = false;
  if (entry.on_step) {
    entry.step_value = metric.batch_value().detach().to(torch::kDouble);
    ARC_CHECK(entry.step_value.numel() == 1, "log('", name, "') logs one value, but ", metric.name(),
              " computes a tensor of shape ", entry.step_value.sizes(), "; log its elements under names of their own");
  }
  if (entry.on_epoch) entry.count = 1;
}

void MetricStore::log(const std::string& name, const torch::Tensor& value, const LogOptions& options, bool training,
                      int64_t batch_size, std::optional<int64_t> dataloader_idx) {
  ARC_CHECK(value.numel() == 1, "log('", name, "') needs a single value, got a tensor of shape ", value.sizes());
  auto& entry = entry_for(name, options, training, dataloader_idx);
  ARC_CHECK(entry.metric == nullptr, "log('", name, "') was given a metric object and a value in one epoch; log ",
            "each under its own name");
  const torch::Tensor detached = value.detach();
  if (entry.on_step) {
    entry.step_value = detached;
    entry.step_unsynced = options.sync_dist();
  }
  if (!entry.on_epoch) return;
  const double v = detached.item<double>();
  const double weight = static_cast<double>(options.batch_size().value_or(std::max<int64_t>(batch_size, 1)));
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

std::string metric_names(const Metrics& metrics, const std::string& missing) {
  std::vector<std::string> names;
  for (const auto& entry : metrics) names.push_back(entry.first);
  if (names.empty()) return "none";
  const std::string near = closest_match(missing, names);
  return join(names) + (near.empty() ? "" : "; did you mean '" + near + "'?");
}

nlohmann::json metric_to_json(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

double metric_from_json(const nlohmann::json& value) {
  if (!value.is_string()) return value.get<double>();
  const auto& text = value.get_ref<const std::string&>();
  ARC_CHECK(text == "nan" || text == "inf" || text == "-inf", "a checkpoint's metric value is \"", text,
            "\", which is not a number (nor \"nan\", \"inf\", \"-inf\"): the file was not written by Arclight; ",
            "resume from a checkpoint Arclight wrote");
  if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
  return text == "inf" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

nlohmann::json metrics_to_json(const Metrics& metrics) {
  nlohmann::json json = nlohmann::json::object();
  for (const auto& [name, value] : metrics) json[name] = metric_to_json(value);
  return json;
}

Metrics metrics_from_json(const nlohmann::json& json) {
  Metrics metrics;
  for (const auto& [name, value] : json.items()) metrics[name] = metric_from_json(value);
  return metrics;
}

nlohmann::json MetricStore::state_dict() const {
  nlohmann::json state = nlohmann::json::object();
  for (const auto& [name, e] : entries_) {
    // A metric object's state is its own: a run resumed mid-epoch computes it over the updates
    // after the resume.
    if (e.metric != nullptr) continue;
    state[name] = {{"on_step", e.on_step},
                   {"on_epoch", e.on_epoch},
                   {"prog_bar", e.prog_bar},
                   {"logger", e.logger},
                   {"sync_dist", e.sync_dist},
                   {"reduce", static_cast<int>(e.reduce)},
                   {"weighted_sum", metric_to_json(e.weighted_sum)},
                   {"weight", metric_to_json(e.weight)},
                   {"extreme", metric_to_json(e.extreme)},
                   {"count", e.count}};
    if (e.step_value.defined()) state[name]["step_value"] = metric_to_json(e.step_value.item<double>());
    if (e.epoch_value) state[name]["epoch_value"] = metric_to_json(*e.epoch_value);
    if (!e.suffix.empty()) state[name]["suffix"] = e.suffix;
  }
  return state;
}

void MetricStore::load_state_dict(const nlohmann::json& state) {
  entries_.clear();
  for (const auto& [name, json] : state.items()) {
    auto& e = entries_[name];
    e.on_step = json.at("on_step").get<bool>();
    e.on_epoch = json.at("on_epoch").get<bool>();
    e.prog_bar = json.at("prog_bar").get<bool>();
    e.logger = json.at("logger").get<bool>();
    e.sync_dist = json.at("sync_dist").get<bool>();
    e.reduce = static_cast<Reduce>(detail::json_integer(json.at("reduce"), "a metric's reduce", 0, 3));
    e.weighted_sum = metric_from_json(json.at("weighted_sum"));
    e.weight = metric_from_json(json.at("weight"));
    e.extreme = metric_from_json(json.at("extreme"));
    e.count = detail::json_integer(json.at("count"), "a metric's count");
    if (json.contains("step_value"))
      e.step_value = torch::tensor(metric_from_json(json.at("step_value")), torch::kDouble);
    if (json.contains("epoch_value")) e.epoch_value = metric_from_json(json.at("epoch_value"));
    e.suffix = json.value("suffix", std::string());
  }
}

namespace {

// Lightning's forked names: "loss_step" and "loss_epoch" for a value logged both ways, a loader's
// suffix after that ("loss_step/dataloader_idx_1").
std::string forked(const std::string& key, const std::string& suffix, const char* fork) {
  return key.substr(0, key.size() - suffix.size()) + fork + suffix;
}

}  // namespace

std::string MetricStore::step_name(const std::string& key, const Entry& entry) {
  return entry.on_epoch ? forked(key, entry.suffix, "_step") : key;
}

std::string MetricStore::epoch_name(const std::string& key, const Entry& entry) {
  return entry.on_step ? forked(key, entry.suffix, "_epoch") : key;
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

namespace {

// Gathers `packed`, the values of `names`, from every rank, with names_hash after them: ranks that
// sync as many values under other names (a name with the rank in it) fail instead of adding one
// rank's value into another's.
std::vector<std::vector<double>> gather_named(const GatherFn& gather, std::vector<double> packed,
                                              const std::vector<std::string>& names) {
  const double hash = names_hash(names);
  packed.push_back(hash);
  auto ranks = gather(packed);
  for (size_t r = 0; r < ranks.size(); ++r)
    ARC_CHECK(ranks[r].size() == packed.size() && ranks[r].back() == hash,
              "the values logged with sync_dist=True have other names on rank ", r, " than here (", join(names),
              "); every rank must sync the same names: log a value whose name differs by rank without sync_dist");
  return ranks;
}

}  // namespace

// Names are sorted so that every rank packs the same values in the same order.
std::vector<std::string> MetricStore::synced_names(bool epoch) const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries_)
    if (entry.sync_dist && (epoch ? entry.on_epoch : entry.on_step && entry.step_unsynced)) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

void MetricStore::sync_epoch(const GatherFn& gather) {
  const auto names = synced_names(true);
  if (names.empty()) return;
  std::vector<double> packed;
  for (const auto& name : names) {
    const auto& e = entries_.at(name);
    packed.insert(packed.end(), {e.weighted_sum, e.weight, e.extreme, static_cast<double>(e.count)});
  }
  const auto ranks = gather_named(gather, std::move(packed), names);
  for (size_t i = 0; i < names.size(); ++i) {
    auto& e = entries_.at(names[i]);
    e.weighted_sum = e.weight = 0;
    int64_t count = 0;
    for (const auto& values : ranks) {
      const double* v = &values[i * 4];
      e.weighted_sum += v[0];
      e.weight += v[1];
      if (v[3] > 0) {
        const bool first = count == 0;
        if (first || (e.reduce == Reduce::max && v[2] > e.extreme) || (e.reduce == Reduce::min && v[2] < e.extreme))
          e.extreme = v[2];
      }
      count += static_cast<int64_t>(v[3]);
    }
    e.count = count;
  }
}

void MetricStore::sync_step_values(const GatherFn& gather) {
  if (!gather) return;
  const auto names = synced_names(false);
  if (names.empty()) return;
  std::vector<double> packed;
  for (const auto& name : names) packed.push_back(entries_.at(name).step_value.item<double>());
  const auto ranks = gather_named(gather, std::move(packed), names);
  for (size_t i = 0; i < names.size(); ++i) {
    auto& e = entries_.at(names[i]);
    double value = ranks.front()[i];
    for (size_t r = 1; r < ranks.size(); ++r) {
      const double v = ranks[r][i];
      value = e.reduce == Reduce::max ? std::max(value, v) : e.reduce == Reduce::min ? std::min(value, v) : value + v;
    }
    if (e.reduce == Reduce::mean) value /= static_cast<double>(ranks.size());
    e.step_value = torch::scalar_tensor(value, torch::kDouble);
    e.step_unsynced = false;
  }
}

bool MetricStore::has_unsynced_step_values() const {
  return std::any_of(entries_.begin(), entries_.end(), [](const auto& entry) { return entry.second.step_unsynced; });
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

// In name order, so that every rank computes the same metrics in the same order (each a collective).
void MetricStore::compute_metrics(const GatherFn& gather, Metrics& out) {
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries_)
    if (entry.metric != nullptr && entry.on_epoch && entry.count > 0) names.push_back(name);
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    auto& entry = entries_.at(name);
    const auto value = entry.metric->compute(gather);
    ARC_CHECK(value.numel() == 1, "log('", name, "') logs one value, but ", entry.metric->name(),
              " computes a tensor of shape ", value.sizes(), "; log its elements under names of their own");
    entry.epoch_value = value.item<double>();
    entry.count = 0;
    if (entry.logger) out[epoch_name(name, entry)] = *entry.epoch_value;
  }
  // Every metric logged in the epoch starts the next one afresh, as Lightning resets them.
  for (auto& [name, entry] : entries_) {
    if (entry.metric == nullptr) continue;
    entry.metric->reset();
    entry.metric = nullptr;
  }
}

Metrics MetricStore::end_epoch(const GatherFn& gather) {
  if (gather) sync_epoch(gather);
  Metrics out;
  // Metrics first: their entries have no aggregate left after.
  compute_metrics(gather, out);
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
