// The command line as a library: arc::cli::run with CliOptions, and what arc::cli::main registers.
#include <arc/cli/cli.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

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

}  // namespace
