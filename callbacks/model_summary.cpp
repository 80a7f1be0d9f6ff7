// ModelSummary.
#include <arc/callbacks/model_summary.h>

#include <arc/base/console.h>
#include <arc/core/trainer.h>

#include <fmt/format.h>

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

std::string ModelSummary::summarize(const TrainModule& module) {
  std::string text = fmt::format("  | {:<16} | {:<20} | {:>10}\n", "Name", "Type", "Params");
  int64_t index = 0;
  for (const auto& child : module.named_children()) {
    text += fmt::format("{} | {:<16} | {:<20} | {:>10}\n", index++, child.key(), short_type(child.value()->name()),
                        count(*child.value()).total);
  }
  const Counts totals = count(module);
  text += fmt::format("{} trainable params\n{} non-trainable params\n{} total params\n{:.3f} MB total params size",
                      totals.trainable, totals.total - totals.trainable, totals.total,
                      static_cast<double>(totals.bytes) / 1e6);
  return text;
}

void ModelSummary::on_fit_start(Trainer& trainer, TrainModule& module) {
  if (trainer.is_global_zero()) console().info("model summary\n{}", summarize(module));
}

}  // namespace arc
