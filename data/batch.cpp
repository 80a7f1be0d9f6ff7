// Batch access and device moves.
#include <arc/data/batch.h>

#include <arc/base/error.h>

#include <torch/torch.h>

namespace arc {
namespace {

torch::Tensor move(const torch::Tensor& tensor, torch::Device device, std::optional<torch::ScalarType> dtype,
                   bool non_blocking) {
  if (dtype && tensor.is_floating_point()) return tensor.to(device, *dtype, non_blocking);
  return tensor.to(device, non_blocking);
}

}  // namespace

Batch& Batch::add(torch::Tensor tensor) {
  tensors_.push_back(std::move(tensor));
  return *this;
}

Batch& Batch::set(const std::string& name, torch::Tensor tensor) {
  for (auto& entry : named_) {
    if (entry.first == name) {
      entry.second = std::move(tensor);
      return *this;
    }
  }
  named_.emplace_back(name, std::move(tensor));
  return *this;
}

torch::Tensor& Batch::operator[](size_t index) {
  return const_cast<torch::Tensor&>(static_cast<const Batch&>(*this)[index]);
}

const torch::Tensor& Batch::operator[](size_t index) const {
  ARC_CHECK(index < tensors_.size(), "batch has ", tensors_.size(), " positional tensors, asked for index ", index);
  return tensors_[index];
}

torch::Tensor& Batch::operator[](const std::string& name) {
  return const_cast<torch::Tensor&>(static_cast<const Batch&>(*this)[name]);
}

const torch::Tensor& Batch::operator[](const std::string& name) const {
  const torch::Tensor* found = find(name);
  if (found == nullptr) {
    std::vector<std::string> names;
    for (const auto& entry : named_) names.push_back(entry.first);
    throw Error(unknown_name_message("batch tensor", name, names));
  }
  return *found;
}

bool Batch::contains(const std::string& name) const { return find(name) != nullptr; }

const torch::Tensor* Batch::find(const std::string& name) const {
  for (const auto& entry : named_)
    if (entry.first == name) return &entry.second;
  return nullptr;
}

int64_t Batch::batch_size() const {
  if (tensors_.empty() && named_.empty() && !parts_.empty()) return parts_.front().batch_size();
  const torch::Tensor* first = !tensors_.empty() ? &tensors_.front()
                               : !named_.empty() ? &named_.front().second
                                                 : nullptr;
  if (first == nullptr || !first->defined() || first->dim() == 0) return 0;
  return first->size(0);
}

Batch& Batch::set_part(const std::string& name, Batch part) {
  for (size_t i = 0; i < part_names_.size(); ++i) {
    if (part_names_[i] == name) {
      parts_[i] = std::move(part);
      return *this;
    }
  }
  part_names_.push_back(name);
  parts_.push_back(std::move(part));
  return *this;
}

Batch& Batch::part(const std::string& name) { return const_cast<Batch&>(static_cast<const Batch&>(*this).part(name)); }

const Batch& Batch::part(const std::string& name) const {
  const Batch* found = find_part(name);
  if (found == nullptr) {
    ARC_CHECK(!part_names_.empty(), "the batch has no part '", name,
              "': only a CombinedLoader's batches have parts (one per source); read this batch's tensors with [] ",
              "instead");
    throw Error(unknown_name_message("batch part", name, part_names_) +
                " (under CombinedLoader's \"max_size\" a source that ran out has no part: ask has_part first)");
  }
  return *found;
}

bool Batch::has_part(const std::string& name) const { return find_part(name) != nullptr; }

const Batch* Batch::find_part(const std::string& name) const {
  for (size_t i = 0; i < part_names_.size(); ++i)
    if (part_names_[i] == name) return &parts_[i];
  return nullptr;
}

Batch Batch::to(torch::Device device, std::optional<torch::ScalarType> dtype, bool non_blocking) const {
  return map([&](const torch::Tensor& tensor) { return move(tensor, device, dtype, non_blocking); });
}

Batch Batch::pin_memory() const {
  return map([](const torch::Tensor& tensor) { return tensor.is_cpu() ? tensor.pin_memory() : tensor; });
}

Batch Batch::map(const std::function<torch::Tensor(const torch::Tensor&)>& fn) const {
  Batch out;
  out.tensors_.reserve(tensors_.size());
  for (const auto& tensor : tensors_) out.tensors_.push_back(fn(tensor));
  for (const auto& entry : named_) out.named_.emplace_back(entry.first, fn(entry.second));
  out.part_names_ = part_names_;
  out.parts_.reserve(parts_.size());
  for (const auto& part : parts_) out.parts_.push_back(part.map(fn));
  return out;
}

Batch collate(const std::vector<Batch>& samples) {
  ARC_CHECK(!samples.empty(), "collate got no samples; a batch needs at least one");
  const Batch& first = samples.front();
  for (size_t i = 1; i < samples.size(); ++i) {
    const Batch& sample = samples[i];
    ARC_CHECK(sample.tensors().size() == first.tensors().size() && sample.named().size() == first.named().size(),
              "sample ", i, " of a batch has ", sample.tensors().size(), " positional and ", sample.named().size(),
              " named tensors, the first sample ", first.tensors().size(), " and ", first.named().size(),
              "; every sample of a stream must have the same tensors");
  }
  const auto stack = [&](const std::function<const torch::Tensor&(const Batch&)>& pick) {
    std::vector<torch::Tensor> parts;
    parts.reserve(samples.size());
    for (const auto& sample : samples) parts.push_back(pick(sample));
    return torch::stack(parts);
  };
  Batch out;
  for (size_t t = 0; t < first.tensors().size(); ++t)
    out.add(stack([t](const Batch& sample) -> const torch::Tensor& { return sample.tensors()[t]; }));
  for (const auto& [name, tensor] : first.named())
    out.set(name, stack([&name = name](const Batch& sample) -> const torch::Tensor& { return sample[name]; }));
  return out;
}

}  // namespace arc
