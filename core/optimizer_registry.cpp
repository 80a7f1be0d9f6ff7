// The optimizers and schedulers a config can name.
#include <arc/core/optimizer_registry.h>

#include <arc/core/lr_scheduler.h>

#include <torch/torch.h>

#include <optional>

namespace arc {
namespace {

// The value of `key` (`fallback` when not given; none: the key is required), which `optimizer` takes
// only when >= 0, as PyTorch's optimizers check it: here the error names the key, where LibTorch's
// check names neither it nor the config and prints a C++ stack trace.
double non_negative(const Config& config, const char* optimizer, const std::string& key,
                    std::optional<double> fallback) {
  const double value = fallback ? config.get<double>(key, *fallback) : config.require<double>(key);
  ARC_CHECK(value >= 0, optimizer, " ", key, " must be >= 0, got ", value);
  return value;
}

// betas as PyTorch writes them: a list of two numbers, each in [0, 1).
std::tuple<double, double> read_betas(const Config& config, const char* optimizer,
                                      std::tuple<double, double> fallback) {
  const auto betas = config.get<std::vector<double>>("betas", {std::get<0>(fallback), std::get<1>(fallback)});
  ARC_CHECK(betas.size() == 2, "config key '", config.qualified("betas"), "' must be two numbers, e.g. [0.9, 0.999]");
  for (const double beta : betas)
    ARC_CHECK(beta >= 0 && beta < 1, optimizer, " betas must each be in [0, 1), got [", betas[0], ", ", betas[1], "]");
  return {betas[0], betas[1]};
}

template <typename Options>
void read_adam(const Config& config, const char* optimizer, Options& options) {
  options.betas(read_betas(config, optimizer, options.betas()));
  options.eps(non_negative(config, optimizer, "eps", options.eps()));
  options.weight_decay(non_negative(config, optimizer, "weight_decay", options.weight_decay()));
  options.amsgrad(config.get<bool>("amsgrad", options.amsgrad()));
}

using Parameters = std::vector<torch::Tensor>;

Registry<torch::optim::Optimizer, Parameters, const Config&> shipped_optimizers() {
  Registry<torch::optim::Optimizer, Parameters, const Config&> r("optimizer");
  r.add("SGD", [](Parameters parameters, const Config& config) {
    torch::optim::SGDOptions options(non_negative(config, "SGD", "lr", std::nullopt));
    options.momentum(non_negative(config, "SGD", "momentum", 0.0)).dampening(config.get<double>("dampening", 0.0));
    options.weight_decay(non_negative(config, "SGD", "weight_decay", 0.0))
        .nesterov(config.get<bool>("nesterov", false));
    ARC_CHECK(!options.nesterov() || (options.momentum() > 0 && options.dampening() == 0),
              "SGD nesterov needs momentum > 0 and dampening 0, got momentum ", options.momentum(), " and dampening ",
              options.dampening());
    return std::make_shared<torch::optim::SGD>(std::move(parameters), options);
  });
  r.add("Adam", [](Parameters parameters, const Config& config) {
    torch::optim::AdamOptions options(non_negative(config, "Adam", "lr", 1e-3));
    read_adam(config, "Adam", options);
    return std::make_shared<torch::optim::Adam>(std::move(parameters), options);
  });
  r.add("AdamW", [](Parameters parameters, const Config& config) {
    torch::optim::AdamWOptions options(non_negative(config, "AdamW", "lr", 1e-3));
    read_adam(config, "AdamW", options);
    return std::make_shared<torch::optim::AdamW>(std::move(parameters), options);
  });
  r.add("RMSprop", [](Parameters parameters, const Config& config) {
    torch::optim::RMSpropOptions options(non_negative(config, "RMSprop", "lr", 1e-2));
    options.alpha(non_negative(config, "RMSprop", "alpha", 0.99)).eps(non_negative(config, "RMSprop", "eps", 1e-8));
    options.weight_decay(non_negative(config, "RMSprop", "weight_decay", 0.0))
        .momentum(non_negative(config, "RMSprop", "momentum", 0.0));
    options.centered(config.get<bool>("centered", false));
    return std::make_shared<torch::optim::RMSprop>(std::move(parameters), options);
  });
  r.add("Adagrad", [](Parameters parameters, const Config& config) {
    torch::optim::AdagradOptions options(non_negative(config, "Adagrad", "lr", 1e-2));
    options.lr_decay(non_negative(config, "Adagrad", "lr_decay", 0.0))
        .weight_decay(non_negative(config, "Adagrad", "weight_decay", 0.0));
    options.initial_accumulator_value(non_negative(config, "Adagrad", "initial_accumulator_value", 0.0));
    options.eps(non_negative(config, "Adagrad", "eps", 1e-10));
    return std::make_shared<torch::optim::Adagrad>(std::move(parameters), options);
  });
  return r;
}

// Lightning's lr_scheduler_config keys, read first, beside the scheduler `build()` makes of its own
// arguments (read first, they are all listed by `--lr_scheduler.help` even where a survey's zeros
// stop the scheduler's constructor).
template <typename Build>
std::shared_ptr<SchedulerConfig> scheduled(const Config& config, const Build& build) {
  auto out = std::make_shared<SchedulerConfig>();
  out->interval =
      interval_named(config.get<std::string>("interval", "epoch"), "config key '" + config.qualified("interval") + "'");
  out->frequency = config.get<int64_t>("frequency", 1);
  ARC_CHECK(out->frequency >= 1, "config key '", config.qualified("frequency"), "' must be >= 1, got ", out->frequency);
  out->monitor = config.get<std::string>("monitor", "");
  out->scheduler = build();
  return out;
}

using Optimizer = torch::optim::Optimizer;

Registry<SchedulerConfig, Optimizer&, const Config&> shipped_schedulers() {
  Registry<SchedulerConfig, Optimizer&, const Config&> r("lr_scheduler");
  r.add("StepLR", [](Optimizer& optimizer, const Config& config) {
    return scheduled(config, [&] {
      return std::make_shared<StepLR>(optimizer, config.require<int64_t>("step_size"),
                                      config.get<double>("gamma", 0.1));
    });
  });
  r.add("MultiStepLR", [](Optimizer& optimizer, const Config& config) {
    return scheduled(config, [&] {
      return std::make_shared<MultiStepLR>(optimizer, config.require<std::vector<int64_t>>("milestones"),
                                           config.get<double>("gamma", 0.1));
    });
  });
  r.add("ExponentialLR", [](Optimizer& optimizer, const Config& config) {
    return scheduled(config,
                     [&] { return std::make_shared<ExponentialLR>(optimizer, config.require<double>("gamma")); });
  });
  r.add("CosineAnnealingLR", [](Optimizer& optimizer, const Config& config) {
    return scheduled(config, [&] {
      return std::make_shared<CosineAnnealingLR>(optimizer, config.require<int64_t>("T_max"),
                                                 config.get<double>("eta_min", 0.0));
    });
  });
  r.add("PolynomialLR", [](Optimizer& optimizer, const Config& config) {
    return scheduled(config, [&] {
      return std::make_shared<PolynomialLR>(optimizer, config.get<int64_t>("total_iters", 5),
                                            config.get<double>("power", 1.0));
    });
  });
  r.add("CosineAnnealingWarmRestarts", [](Optimizer& optimizer, const Config& config) {
    return scheduled(config, [&] {
      return std::make_shared<CosineAnnealingWarmRestarts>(optimizer, config.require<int64_t>("T_0"),
                                                           config.get<int64_t>("T_mult", 1),
                                                           config.get<double>("eta_min", 0.0));
    });
  });
  r.add("OneCycleLR", [](Optimizer& optimizer, const Config& config) {
    OneCycleLR::Options options;
    options.pct_start(config.get<double>("pct_start", options.pct_start()));
    const auto anneal = config.get<std::string>("anneal_strategy", "cos");
    ARC_CHECK(anneal == "cos" || anneal == "linear", "config key '", config.qualified("anneal_strategy"),
              "' must be \"cos\" or \"linear\", got \"", anneal, "\"");
    options.cosine(anneal == "cos");
    options.cycle_momentum(config.get<bool>("cycle_momentum", options.cycle_momentum()));
    options.base_momentum(config.get<double>("base_momentum", options.base_momentum()));
    options.max_momentum(config.get<double>("max_momentum", options.max_momentum()));
    options.div_factor(config.get<double>("div_factor", options.div_factor()));
    options.final_div_factor(config.get<double>("final_div_factor", options.final_div_factor()));
    options.three_phase(config.get<bool>("three_phase", options.three_phase()));
    return scheduled(config, [&] {
      return std::make_shared<OneCycleLR>(optimizer, config.require<double>("max_lr"),
                                          config.require<int64_t>("total_steps"), options);
    });
  });
  r.add("ConstantLR", [](Optimizer& optimizer, const Config& config) {
    return scheduled(config, [&] {
      return std::make_shared<ConstantLR>(optimizer, config.get<double>("factor", 1.0 / 3),
                                          config.get<int64_t>("total_iters", 5));
    });
  });
  r.add("CyclicLR", [](Optimizer& optimizer, const Config& config) {
    CyclicLR::Options options;
    options.step_size_up(config.get<int64_t>("step_size_up", options.step_size_up()));
    const auto down = config.get<nlohmann::json>("step_size_down", nullptr);
    if (!down.is_null()) options.step_size_down(config.get<int64_t>("step_size_down", 0));
    options.mode(config.get<std::string>("mode", options.mode()));
    options.gamma(config.get<double>("gamma", options.gamma()));
    options.cycle_momentum(config.get<bool>("cycle_momentum", options.cycle_momentum()));
    options.base_momentum(config.get<double>("base_momentum", options.base_momentum()));
    options.max_momentum(config.get<double>("max_momentum", options.max_momentum()));
    return scheduled(config, [&] {
      return std::make_shared<CyclicLR>(optimizer, config.require<double>("base_lr"), config.require<double>("max_lr"),
                                        options);
    });
  });
  r.add("LinearWarmup", [](Optimizer& optimizer, const Config& config) {
    return scheduled(config, [&] {
      return std::make_shared<LinearWarmup>(optimizer, config.require<int64_t>("total_iters"),
                                            config.get<double>("start_factor", 1.0 / 3),
                                            config.get<double>("end_factor", 1.0));
    });
  });
  r.add("ReduceLROnPlateau", [](Optimizer& optimizer, const Config& config) {
    const auto mode = config.get<std::string>("mode", "min");
    ARC_CHECK(mode == "min" || mode == "max", "config key '", config.qualified("mode"),
              "' must be \"min\" or \"max\", got \"", mode, "\"");
    return scheduled(config, [&] {
      return std::make_shared<ReduceLROnPlateau>(
          optimizer, mode == "max" ? ReduceLROnPlateau::Mode::max : ReduceLROnPlateau::Mode::min,
          config.get<double>("factor", 0.1), config.get<int64_t>("patience", 10), config.get<double>("threshold", 1e-4),
          config.get<int64_t>("cooldown", 0), config.get<double>("min_lr", 0.0));
    });
  });
  return r;
}

}  // namespace

Registry<torch::optim::Optimizer, std::vector<torch::Tensor>, const Config&>& optimizer_registry() {
  static auto registry = shipped_optimizers();
  return registry;
}

Registry<SchedulerConfig, torch::optim::Optimizer&, const Config&>& lr_scheduler_registry() {
  static auto registry = shipped_schedulers();
  return registry;
}

namespace {

// The optimizer `optimizer_json` names over `parameters` (or fallback()), with the scheduler
// `scheduler_json` names (when not null); `resolved`, when given, gets both entries spelt out
// (with_class_path), nulls where not given.
OptimizerConfig build_optimizer(const nlohmann::json& optimizer_json, const nlohmann::json& scheduler_json,
                                std::vector<torch::Tensor> parameters, const std::function<OptimizerConfig()>& fallback,
                                std::pair<nlohmann::json, nlohmann::json>* resolved = nullptr) {
  OptimizerConfig out = optimizer_json.is_null()
                            ? fallback()
                            : OptimizerConfig(detail::with_class_path(
                                  optimizer_json, "optimizer",
                                  [&](const std::string& name, const Config& init_args) {
                                    // LibTorch's own checks of the options (an optimizer registered
                                    // elsewhere) are errors of the entry, without a C++ stack trace.
                                    try {
                                      return optimizer_registry().create(name, std::move(parameters), init_args);
                                    } catch (const c10::Error& error) {
                                      throw Error(error.what_without_backtrace());
                                    }
                                  },
                                  resolved != nullptr ? &resolved->first : nullptr));
  if (!scheduler_json.is_null()) {
    auto& optimizer = *out.optimizer;
    out.lr_scheduler = *detail::with_class_path(
        scheduler_json, "lr_scheduler",
        [&](const std::string& name, const Config& init_args) {
          return lr_scheduler_registry().create(name, optimizer, init_args);
        },
        resolved != nullptr ? &resolved->second : nullptr);
  }
  return out;
}

}  // namespace

void TrainModule::set_optimizer_config(nlohmann::json optimizer, nlohmann::json lr_scheduler) {
  // Built once now over a stand-in parameter, so that a bad entry is an error before any rank starts;
  // kept as that build spells the entries out ({class_path, init_args} with every default), which
  // build the same optimizer and scheduler.
  const auto stand_in = [] { return std::vector<torch::Tensor>{torch::zeros({1}).requires_grad_()}; };
  std::pair<nlohmann::json, nlohmann::json> resolved;
  build_optimizer(
      optimizer, lr_scheduler, stand_in(),
      [&] { return OptimizerConfig(std::make_shared<torch::optim::SGD>(stand_in(), torch::optim::SGDOptions(0.1))); },
      &resolved);
  optimizer_json_ = std::move(resolved.first);
  scheduler_json_ = std::move(resolved.second);
}

OptimizerConfig TrainModule::configured_optimizer(std::vector<torch::Tensor> parameters,
                                                  const std::function<OptimizerConfig()>& fallback) {
  optimizer_config_used_ = true;
  return build_optimizer(optimizer_json_, scheduler_json_, std::move(parameters), fallback);
}

}  // namespace arc
