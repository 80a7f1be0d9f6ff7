// ModelSummary.
#include <arc/callbacks/model_summary.h>

#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/core/trainer.h>

#include <fmt/format.h>

#include <algorithm>

namespace arc {
namespace {

struct Counts {
  int64_t total = 0;
  int64_t trainable = 0;
  int64_t bytes = 0;
};

Counts count(const torch::nn::Module& module) {
  Counts out;
  for (const auto& parameter : module.parameters(true)) {
    out.total += parameter.numel();
    if (parameter.requires_grad()) out.trainable += parameter.numel();
    out.bytes += parameter.numel() * static_cast<int64_t>(parameter.element_size());
  }
  return out;
}

// "torch::nn::LinearImpl" → "Linear", as Lightning shows layer types.
std::string short_type(std::string type) {
  const auto colon = type.rfind("::");
  if (colon != std::string::npos) type = type.substr(colon + 2);
  if (type.size() > 4 && type.compare(type.size() - 4, 4, "Impl") == 0) type.resize(type.size() - 4);
  return type;
}

}  // namespace

ModelSummary::ModelSummary(int64_t max_depth) : max_depth_(max_depth) {
  ARC_CHECK(max_depth >= -1, "ModelSummary: max_depth is ", max_depth,
            "; use -1 (every level), 0 (no table) or a depth >= 1");
}

std::string ModelSummary::summarize(const TrainModule& module, int64_t max_depth) {
  std::string text = fmt::format("  | {:<16} | {:<20} | {:>10}\n", "Name", "Type", "Params");
  int64_t index = 0;
  for (const auto& layer : module.named_modules("", /*include_self=*/false)) {
    const auto depth = 1 + std::count(layer.key().begin(), layer.key().end(), '.');
    if (max_depth != -1 && depth > max_depth) continue;
    text += fmt::format("{} | {:<16} | {:<20} | {:>10}\n", index++, layer.key(), short_type(layer.value()->name()),
                        count(*layer.value()).total);
  }
  const Counts totals = count(module);
  text += fmt::format("{} trainable params\n{} non-trainable params\n{} total params\n{:.3f} MB total params size",
                      totals.trainable, totals.total - totals.trainable, totals.total,
                      static_cast<double>(totals.bytes) / 1e6);
  return text;
}

void ModelSummary::on_fit_start(Trainer& trainer, TrainModule& module) {
  if (trainer.is_global_zero() && max_depth_ != 0) console().info("model summary\n{}", summarize(module, max_depth_));
}

}  // namespace arc
