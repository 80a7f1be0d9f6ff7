// The `arc` command line tool.
#include <arc/apps/cli.h>

#include <arc/apps/examples/run_report.h>
#include <arc/base/config.h>
#include <arc/base/console.h>
#include <arc/callbacks/on_exception_checkpoint.h>
#include <arc/core/module_registry.h>
#include <arc/core/trainer.h>

#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <iostream>

namespace arc::cli {
namespace {

const char* kExamples = R"(Examples:
  arc train                                   train mlp_classifier one epoch on the canonical data
  arc train --config run.json                 train what run.json describes
  arc train --set module.name=cnn_classifier --set trainer.max_epochs=3
  arc train --set data.batch_size=128 --set trainer.limit_train_batches=0.1
  arc train --resume last                     continue from checkpoints/last.ckpt, exactly
  arc validate --config run.json --ckpt last  one validation pass with the last checkpoint's weights
  arc modules                                 list registered modules and data modules

A config has three sections:
  {"module": {"name": "mlp_classifier", "hidden": 256},
   "data": {"batch_size": 64},
   "trainer": {"max_epochs": 1, "accelerator": "cpu"}}
)";

// What a config section names, built and checked.
struct Experiment {
  std::shared_ptr<TrainModule> module;
  std::shared_ptr<DataModule> data;
  TrainerOptions options;
};

Experiment build(const nlohmann::json& config_json) {
  Config root(config_json, "");
  Experiment out;
  const auto* module_json = root.find("module");
  Config module(module_json ? *module_json : nlohmann::json::object(), "module");
  const std::string module_name = module.get<std::string>("name", "mlp_classifier");
  out.module = module_registry().create(module_name, module);
  module.finish();
  const auto* data_json = root.find("data");
  Config data(data_json ? *data_json : nlohmann::json::object(), "data");
  const std::string fallback = default_data_module(module_name);
  const auto data_name = fallback.empty() ? data.require<std::string>("name") : data.get<std::string>("name", fallback);
  out.data = data_module_registry().create(data_name, data);
  data.finish();
  const auto* trainer_json = root.find("trainer");
  out.options = TrainerOptions::from_json(trainer_json ? *trainer_json : nlohmann::json::object());
  root.finish();
  return out;
}

void print_result(const nlohmann::json& result) { std::cout << "RESULT " << result.dump() << std::endl; }

int train(const nlohmann::json& config, const std::string& resume) {
  auto experiment = build(config);
  auto report = std::make_shared<examples::RunReport>();
  // Ctrl-C (or any failure) during fit saves where the run stopped, to resume from with --resume.
  auto on_exception = std::make_shared<OnExceptionCheckpoint>(experiment.options.default_root_dir() + "/checkpoints");
  Trainer trainer(experiment.options, {report, on_exception});
  trainer.fit(*experiment.module, *experiment.data, resume);
  if (trainer.is_global_zero()) print_result(report->report(trainer, *experiment.module));
  return 0;
}

int evaluate(const std::string& command, const nlohmann::json& config, const std::string& ckpt) {
  auto experiment = build(config);
  Trainer trainer(experiment.options);
  nlohmann::json result;
  if (command == "validate") {
    result = trainer.validate(*experiment.module, *experiment.data, ckpt);
  } else if (command == "test") {
    result = trainer.test(*experiment.module, *experiment.data, ckpt);
  } else {
    const auto outputs = trainer.predict(*experiment.module, *experiment.data, ckpt);
    int64_t count = 0;
    for (const auto& output : outputs) count += output.size(0);
    result = {{"batches", outputs.size()}, {"predictions", count}};
  }
  if (trainer.is_global_zero()) print_result(result);
  return 0;
}

int list_modules() {
  std::cout << "modules:\n";
  for (const auto& name : module_registry().names()) {
    const auto data = default_data_module(name);
    std::cout << "  " << name << (data.empty() ? "" : "  (data: " + data + ")") << "\n";
  }
  std::cout << "data modules:\n";
  for (const auto& name : data_module_registry().names()) std::cout << "  " << name << "\n";
  return 0;
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app("arc: train LibTorch modules with Arclight", "arc");
  app.footer(kExamples);
  app.require_subcommand(1);
  std::string config_path, ckpt;
  std::vector<std::string> overrides;
  std::vector<CLI::App*> runs;
  for (const char* name : {"train", "validate", "test", "predict"}) {
    auto* command = app.add_subcommand(name, std::string(name) + " a registered module as the config says");
    command->add_option("--config,-c", config_path, "JSON config with sections module, data, trainer");
    command->add_option("--set,-s", overrides, "override one key: section.key=value (JSON or text)");
    if (std::string(name) == "train") {
      command->add_option("--resume", ckpt, "continue exactly from a checkpoint: a path, \"last\" or \"best\"");
    } else {
      command->add_option("--ckpt", ckpt, "load the weights of this checkpoint (a path or \"last\") first");
    }
    runs.push_back(command);
  }
  auto* modules = app.add_subcommand("modules", "list registered modules and data modules");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
  try {
    if (modules->parsed()) return list_modules();
    for (auto* command : runs) {
      if (!command->parsed()) continue;
      const auto config = load_config(config_path, overrides);
      return command->get_name() == "train" ? train(config, ckpt) : evaluate(command->get_name(), config, ckpt);
    }
  } catch (const Error& error) {
    std::cerr << "arc: error: " << error.what() << std::endl;
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "arc: failed: " << error.what() << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace arc::cli
