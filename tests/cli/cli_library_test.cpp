// The command line as a library: arc::cli::run with CliOptions, and what arc::cli::main registers.
#include "support/scratch.h"

#include <arc/cli/cli.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace outer::inner {
class Net : public arc::TrainModule {
 public:
  explicit Net(const arc::Config& config) : width(config.get<int64_t>("width", 3)) {}
  torch::Tensor training_step(arc::Batch&, int64_t) override { return {}; }
  std::vector<arc::OptimizerConfig> configure_optimizers() override { return {}; }
  int64_t width;
};
template <typename T>
class Box {};
}  // namespace outer::inner

// Runs the command line on `args` (without the program), returning its status and what it printed.
struct Ran {
  int status;
  std::string out, err;
};
Ran run_cli(std::vector<std::string> args, const arc::cli::CliOptions& options) {
  args.insert(args.begin(), "/somewhere/tool");
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const int status = arc::cli::run(static_cast<int>(argv.size()), argv.data(), options);
  const auto out = testing::internal::GetCapturedStdout();
  return {status, out, testing::internal::GetCapturedStderr()};
}

TEST(CliLibrary, ClassNamesDropTheClassNamespacesButNotThoseOfTemplateArguments) {
  EXPECT_EQ(arc::detail::class_name(typeid(outer::inner::Net)), "Net");
  EXPECT_EQ(arc::detail::class_name(typeid(outer::inner::Box<outer::inner::Net>)),
            "Box<(anonymous namespace)::outer::inner::Net>");
  EXPECT_EQ(arc::detail::class_name(typeid(int)), "int");
}

TEST(CliLibrary, RegisteringAClassTwiceKeepsOneEntryUnderItsName) {
  arc::Registry<arc::TrainModule, const arc::Config&> registry("module");
  EXPECT_EQ(arc::detail::register_class<outer::inner::Net>(registry), "Net");
  EXPECT_EQ(arc::detail::register_class<outer::inner::Net>(registry), "Net");
  EXPECT_EQ(registry.names(), std::vector<std::string>{"Net"});
  const auto built = registry.create("Net", arc::Config(nlohmann::json{{"width", 7}}, "model"));
  EXPECT_EQ(std::dynamic_pointer_cast<outer::inner::Net>(built)->width, 7);
}

TEST(CliLibrary, ErrorsHelpAndVersionNameTheProgram) {
  const auto options = arc::cli::CliOptions().program("my_tool");
  const auto wrong = run_cli({"fitt"}, options);
  EXPECT_EQ(wrong.status, 2);
  EXPECT_NE(wrong.err.find("my_tool: error: unknown subcommand 'fitt'; did you mean 'fit'?"), std::string::npos)
      << wrong.err;
  EXPECT_NE(wrong.err.find("(my_tool --help says what each does)"), std::string::npos) << wrong.err;
  const auto version = run_cli({"--version"}, options);
  EXPECT_EQ(version.status, 0);
  EXPECT_EQ(version.out.rfind("my_tool (Arclight) ", 0), 0u) << version.out;
  // Without a name, the program is called by the file it was started from; without examples, its
  // help shows commands of its own.
  const auto help = run_cli({"--help"}, arc::cli::CliOptions());
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("  tool fit --config run.yaml"), std::string::npos) << help.out;
}

TEST(CliLibrary, TheProgramsModuleAndDataAreWhatAConfigBuildsWhenItNamesNone) {
  const auto chosen =
      run_cli({"fit", "--print_config"}, arc::cli::CliOptions().module("cnn_classifier").data("canonical"));
  ASSERT_EQ(chosen.status, 0) << chosen.err;
  EXPECT_NE(chosen.out.find("name: \"cnn_classifier\""), std::string::npos) << chosen.out;
  EXPECT_NE(chosen.out.find("name: \"canonical\""), std::string::npos) << chosen.out;
  // The config's own choice wins.
  const auto named =
      run_cli({"fit", "--print_config", "--model=mlp_classifier"}, arc::cli::CliOptions().module("cnn_classifier"));
  ASSERT_EQ(named.status, 0) << named.err;
  EXPECT_NE(named.out.find("class_path: \"mlp_classifier\""), std::string::npos) << named.out;
  // Several modules are registered here, so without the program's choice the config must name one.
  const auto none = run_cli({"fit", "--print_config"}, arc::cli::CliOptions());
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.err.find("module.name"), std::string::npos) << none.err;
}

// LightningCLI's default_env: <prefix>_CONFIG and <prefix>_<SECTION>__<KEY> give defaults, which
// config files and flags override; the prefix's variables that name no config key are left alone.
TEST(CliLibrary, EnvironmentVariablesGiveDefaultsThatConfigsAndFlagsOverride) {
  const auto dir = arc::testing::fresh_folder("default_env");
  std::ofstream(dir + "/env.yaml") << "trainer:\n  max_epochs: 4\n  max_steps: 9\n";
  std::ofstream(dir + "/run.yaml") << "trainer:\n  max_steps: 7\n";
  setenv("MY_CLI_CONFIG", (dir + "/env.yaml").c_str(), 1);
  setenv("MY_CLI_TRAINER__MAX_EPOCHS", "3", 1);
  setenv("MY_CLI_MODEL__HIDDEN", "32", 1);
  setenv("MY_CLI_GLOBAL_SEED", "5", 1);  // no config key: left alone
  const auto options = arc::cli::CliOptions().module("mlp_classifier").default_env(true).env_prefix("MY_CLI");
  const auto printed = [&](std::vector<std::string> args, const arc::cli::CliOptions& chosen) {
    args.insert(args.begin(), {"fit", "--print_config"});
    const auto ran = run_cli(args, chosen);
    EXPECT_EQ(ran.status, 0) << ran.err;
    return ran.out;
  };
  const auto from_environment = printed({}, options);
  EXPECT_NE(from_environment.find("max_epochs: 3"), std::string::npos) << from_environment;
  EXPECT_NE(from_environment.find("max_steps: 9"), std::string::npos) << from_environment;
  EXPECT_NE(from_environment.find("hidden: 32"), std::string::npos) << from_environment;
  const auto overridden = printed({"--config", dir + "/run.yaml", "--trainer.max_epochs=5"}, options);
  EXPECT_NE(overridden.find("max_epochs: 5"), std::string::npos) << overridden;
  EXPECT_NE(overridden.find("max_steps: 7"), std::string::npos) << overridden;
  const auto without = printed({}, arc::cli::CliOptions().module("mlp_classifier"));
  EXPECT_EQ(without.find("max_epochs: 3"), std::string::npos) << without;
  EXPECT_NE(without.find("hidden: 256"), std::string::npos) << without;
  // An error in a variable's value names the variable.
  setenv("MY_CLI_TRAINER__MAX_EPOCHS", "three", 1);
  const auto wrong = run_cli({"fit", "--print_config"}, options);
  EXPECT_EQ(wrong.status, 2);
  EXPECT_EQ(wrong.err.rfind("tool: error: MY_CLI_TRAINER__MAX_EPOCHS: ", 0), 0u) << wrong.err;
  for (const char* name : {"MY_CLI_CONFIG", "MY_CLI_TRAINER__MAX_EPOCHS", "MY_CLI_MODEL__HIDDEN", "MY_CLI_GLOBAL_SEED"})
    unsetenv(name);
  std::filesystem::remove_all(dir);
}

// LightningCLI's trainer_defaults: what a run takes where nothing sets the key; the Trainer's own
// defaults without them.
TEST(CliLibrary, TrainerDefaultsGiveWayToConfigsAndFlags) {
  const auto max_epochs = [](std::vector<std::string> args, const arc::cli::CliOptions& options) {
    args.insert(args.begin(), {"fit", "--print_config"});
    const auto ran = run_cli(args, options);
    EXPECT_EQ(ran.status, 0) << ran.err;
    const auto at = ran.out.find("max_epochs: ");
    return at == std::string::npos ? std::string() : ran.out.substr(at + 12, ran.out.find('\n', at) - at - 12);
  };
  const auto options = arc::cli::CliOptions().module("mlp_classifier");
  EXPECT_EQ(max_epochs({}, options), "null") << "the Trainer's default: 1000 epochs unless max_steps is set";
  EXPECT_EQ(max_epochs({}, arc::cli::CliOptions(options).trainer_defaults({{"max_epochs", 2}})), "2");
  EXPECT_EQ(max_epochs({"--trainer.max_epochs=5"}, arc::cli::CliOptions(options).trainer_defaults({{"max_epochs", 2}})),
            "5");
}

// LightningCLI's link_arguments: a target takes its source's value, given or its class's default,
// across sections in either order; a config that sets a target, or a source no class reads, is an error.
TEST(CliLibrary, LinkedArgumentsTakeTheirSourcesValues) {
  const auto printed = [](std::vector<std::string> args, std::vector<arc::cli::ArgumentLink> links) {
    args.insert(args.begin(), {"fit", "--print_config"});
    return run_cli(args, arc::cli::CliOptions().module("mlp_classifier").data("canonical").link_arguments(links));
  };
  const std::vector<arc::cli::ArgumentLink> batch_to_hidden = {{"data.batch_size", "model.hidden"}};
  const auto given = printed({"--data.batch_size=32"}, batch_to_hidden);
  ASSERT_EQ(given.status, 0) << given.err;
  EXPECT_NE(given.out.find("hidden: 32"), std::string::npos) << given.out;
  const auto by_default = printed({}, batch_to_hidden);
  ASSERT_EQ(by_default.status, 0) << by_default.err;
  EXPECT_NE(by_default.out.find("hidden: 64"), std::string::npos) << "canonical's batch_size\n" << by_default.out;
  const auto to_trainer = printed({"--model.hidden=7"}, {{"model.hidden", "trainer.max_steps"}});
  ASSERT_EQ(to_trainer.status, 0) << to_trainer.err;
  EXPECT_NE(to_trainer.out.find("max_steps: 7"), std::string::npos) << to_trainer.out;
  // A trainer_defaults value is the program's: a link replaces it, as a config's key may not be.
  const auto over_default = run_cli({"fit", "--print_config", "--model.hidden=7"},
                                    arc::cli::CliOptions()
                                        .module("mlp_classifier")
                                        .trainer_defaults({{"max_epochs", 1}})
                                        .link_arguments({{"model.hidden", "trainer.max_epochs"}}));
  ASSERT_EQ(over_default.status, 0) << over_default.err;
  EXPECT_NE(over_default.out.find("max_epochs: 7"), std::string::npos) << over_default.out;
  const auto target_set = printed({"--model.hidden=5"}, batch_to_hidden);
  EXPECT_EQ(target_set.status, 2);
  EXPECT_NE(target_set.err.find("config key 'model.hidden' takes the value of 'data.batch_size' (the program links "
                                "them, as LightningCLI's link_arguments); set data.batch_size instead"),
            std::string::npos)
      << target_set.err;
  const auto unread = printed({}, {{"data.batch", "model.hidden"}});
  EXPECT_EQ(unread.status, 2);
  EXPECT_NE(unread.err.find("link_arguments source 'data.batch' is not a key that canonical reads (it reads: "),
            std::string::npos)
      << unread.err;
}

}  // namespace
