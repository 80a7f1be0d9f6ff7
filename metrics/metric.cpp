// Metric: its states, and their combination across ranks in at most two all-gathers (the fixed
// states and the cat states' row counts, then the cat states' rows).
#include <arc/metrics/metric.h>

#include <arc/base/error.h>
#include <arc/base/reduce.h>
#include <arc/strategies/collectives.h>

#include <torch/torch.h>

#include <algorithm>

namespace arc::metrics {

namespace {

// Elements per row of a cat state.
int64_t row_numel(const torch::Tensor& initial) {
  int64_t n = 1;
  for (const auto size : initial.sizes().slice(1)) n *= size;
  return n;
}

torch::Tensor combine(torch::Tensor a, const torch::Tensor& b, StateReduce reduce) {
  if (reduce == StateReduce::sum) return a + b;
  return reduce == StateReduce::min ? torch::minimum(a, b) : torch::maximum(a, b);
}

// `values` from every rank, through `gather`, as tensors.
std::vector<torch::Tensor> gather_tensors(const GatherValues& gather, const torch::Tensor& values) {
  const auto flat = values.contiguous();
  const double* data = flat.data_ptr<double>();
  std::vector<torch::Tensor> out;
  for (const auto& rank : gather(std::vector<double>(data, data + flat.numel())))
    out.push_back(torch::tensor(rank, torch::kDouble));
  return out;
}

}  // namespace

size_t Metric::add_state(const std::string& name, torch::Tensor initial, StateReduce reduce) {
  ARC_CHECK(reduce != StateReduce::cat || (initial.dim() > 0 && initial.size(0) == 0), "a metric's cat state '", name,
            "' must start with zero rows, but it starts with shape ", initial.sizes());
  auto value = reduce == StateReduce::cat ? torch::Tensor() : initial.clone();
  states_.push_back({name, std::move(initial), reduce, std::move(value), {}});
  return states_.size() - 1;
}

void Metric::append(size_t index, const torch::Tensor& rows) {
  auto& state = states_[index];
  const auto row = state.initial.sizes().slice(1);
  ARC_CHECK(rows.dim() == state.initial.dim() && rows.sizes().slice(1) == row, "metric ", name(), ": state '",
            state.name, "' takes rows of shape ", row, ", but got a tensor of shape ", rows.sizes());
  state.rows.push_back(rows.detach().to(torch::kCPU, state.initial.scalar_type()).contiguous());
}

void Metric::reset() {
  for (auto& state : states_) {
    if (state.reduce != StateReduce::cat) state.value = state.initial.clone();
    state.rows.clear();
  }
  last_batch_.clear();
  updates_ = 0;
}

// The states before move aside (no copy of a cat state's rows, which grow all epoch), the batch
// fills fresh ones, and its rows are appended to theirs.
void Metric::add_batch(const std::function<void()>& add) {
  std::vector<State> before = std::move(states_);
  states_.clear();
  for (const auto& state : before)
    states_.push_back({state.name,
                       state.initial,
                       state.reduce,
                       state.reduce == StateReduce::cat ? torch::Tensor() : state.initial.clone(),
                       {}});
  try {
    add();
  } catch (...) {
    states_ = std::move(before);
    throw;
  }
  last_batch_ = local_states();
  for (size_t i = 0; i < states_.size(); ++i) {
    auto& state = states_[i];
    auto& earlier = before[i];
    if (state.reduce == StateReduce::cat) {
      earlier.rows.insert(earlier.rows.end(), state.rows.begin(), state.rows.end());
      state.rows = std::move(earlier.rows);
    } else {
      state.value = combine(earlier.value, state.value, state.reduce);
    }
  }
  ++updates_;
}

torch::Tensor Metric::batch_value() const {
  ARC_CHECK(!last_batch_.empty(), "metric ", name(), " has no batch since its last reset; update it first");
  return compute_from(last_batch_);
}

std::vector<torch::Tensor> Metric::local_states() const {
  std::vector<torch::Tensor> out;
  for (const auto& state : states_) {
    if (state.reduce != StateReduce::cat) {
      out.push_back(state.value);
    } else {
      out.push_back(state.rows.empty() ? state.initial : torch::cat(state.rows));
    }
  }
  return out;
}

GatherValues gather_values(Collectives& group) {
  return [&group](const std::vector<double>& values) {
    const CollectiveName name("metric sync");
    std::vector<std::vector<double>> out;
    for (const auto& rank : group.all_gather(torch::tensor(values, torch::kDouble))) {
      const double* data = rank.data_ptr<double>();
      out.emplace_back(data, data + rank.numel());
    }
    return out;
  };
}

torch::Tensor Metric::compute() {
  if (group_ == nullptr || group_->world_size() == 1) return compute(nullptr);
  return compute(gather_values(*group_));
}

torch::Tensor Metric::compute(const GatherValues& gather) {
  const auto local = local_states();
  return compute_from(gather ? synced_states(gather, local) : local);
}

std::vector<torch::Tensor> Metric::synced_states(const GatherValues& gather,
                                                 const std::vector<torch::Tensor>& local) const {
  // Every fixed state and each cat state's row count, as doubles (which hold the counts and float
  // values exactly), behind a header that tells ranks with other metrics apart.
  std::vector<torch::Tensor> parts;
  std::vector<std::string> layout = {name()};
  for (size_t i = 0; i < states_.size(); ++i) {
    const bool cat = states_[i].reduce == StateReduce::cat;
    parts.push_back(cat ? torch::full({1}, static_cast<double>(local[i].size(0)), torch::kDouble)
                        : local[i].to(torch::kDouble).reshape({-1}));
    layout.push_back(states_[i].name + " " + c10::str(local[i].sizes().slice(cat ? 1 : 0)));
  }
  parts.insert(parts.begin(), torch::tensor({names_hash(layout)}, torch::kDouble));
  const auto gathered = gather_tensors(gather, torch::cat(parts));
  for (size_t r = 0; r < gathered.size(); ++r)
    ARC_CHECK(gathered[r].numel() == gathered[0].numel() && gathered[r][0].item<double>() == names_hash(layout),
              "metric ", name(), ": rank ", r, "'s states differ from this rank's (", join(layout, ", "),
              "); make the same metric, with the same options, on every rank");
  std::vector<torch::Tensor> out(states_.size());
  std::vector<std::vector<int64_t>> rows_of(gathered.size());
  int64_t offset = 1;
  for (size_t i = 0; i < states_.size(); ++i) {
    const bool cat = states_[i].reduce == StateReduce::cat;
    const int64_t numel = cat ? 1 : local[i].numel();
    for (size_t r = 0; r < gathered.size(); ++r) {
      const auto slice = gathered[r].narrow(0, offset, numel);
      if (cat) {
        rows_of[r].push_back(static_cast<int64_t>(slice.item<double>()));
      } else {
        out[i] = r == 0 ? slice.clone() : combine(out[i], slice, states_[i].reduce);
      }
    }
    if (!cat) out[i] = out[i].to(local[i].scalar_type()).reshape(local[i].sizes());
    offset += numel;
  }
  // The cat states' rows, every rank's padded to the longest.
  std::vector<int64_t> elements(gathered.size(), 0);
  for (size_t r = 0; r < gathered.size(); ++r)
    for (size_t i = 0, c = 0; i < states_.size(); ++i)
      if (states_[i].reduce == StateReduce::cat) elements[r] += rows_of[r][c++] * row_numel(states_[i].initial);
  const int64_t longest = *std::max_element(elements.begin(), elements.end());
  if (longest == 0) {
    for (size_t i = 0; i < states_.size(); ++i)
      if (states_[i].reduce == StateReduce::cat) out[i] = states_[i].initial;
    return out;
  }
  auto mine = torch::zeros({longest}, torch::kDouble);
  int64_t at = 0;
  for (size_t i = 0; i < states_.size(); ++i)
    if (states_[i].reduce == StateReduce::cat && local[i].numel() > 0) {
      mine.narrow(0, at, local[i].numel()).copy_(local[i].to(torch::kDouble).reshape({-1}));
      at += local[i].numel();
    }
  const auto rows = gather_tensors(gather, mine);
  for (size_t r = 0; r < rows.size(); ++r) {
    int64_t from = 0;
    for (size_t i = 0, c = 0; i < states_.size(); ++i) {
      if (states_[i].reduce != StateReduce::cat) continue;
      auto shape = states_[i].initial.sizes().vec();
      shape[0] = rows_of[r][c++];
      const int64_t numel = shape[0] * row_numel(states_[i].initial);
      const auto part = rows[r].narrow(0, from, numel).reshape(shape).to(states_[i].initial.scalar_type());
      out[i] = r == 0 ? part : torch::cat({out[i], part});
      from += numel;
    }
  }
  return out;
}

}  // namespace arc::metrics
