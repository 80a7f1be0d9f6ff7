// The profilers: what they count and time in a fit, the report files, a user's own Profiler, the
// advanced profiler's operators and Chrome trace, and the option's checks.
#include "support/scratch.h"
#include "support/tiny_module.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace arc {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const auto root = arc::testing::process_scratch() / ("profiler_" + name);
  fs::remove_all(root);
  return root;
}

std::string text_of(const fs::path& path) {
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

// A row of the simple profiler's table: its cells after the action's.
struct Row {
  int64_t calls = -1;
  double total_seconds = -1;
};

Row row_of(const std::string& report, const std::string& action) {
  std::istringstream lines(report);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| " + action + " ", 0) != 0) continue;
    std::vector<std::string> cells;
    std::istringstream parts(line);
    for (std::string cell; std::getline(parts, cell, '|');) cells.push_back(cell);
    // "", action, mean, calls, max, total, share
    return {std::stoll(cells.at(3)), std::stod(cells.at(5))};
  }
  return {};
}

class BatchCounter : public Callback {
 public:
  std::string state_key() const override { return "Counter"; }
  void on_train_batch_end(Trainer&, TrainModule&, const torch::Tensor&, Batch&, int64_t) override { ++batches; }
  int64_t batches = 0;
};

TEST(SimpleProfiler, CountsAndTimesEachActionAndRefusesUnpairedCalls) {
  SimpleProfiler profiler;
  for (int i = 0; i < 3; ++i) {
    ProfileScope scope(&profiler, "sleep");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  { ProfileScope off(nullptr, "never"); }
  const auto& totals = profiler.totals();
  ASSERT_EQ(totals.size(), 1u);
  EXPECT_EQ(totals.at("sleep").calls, 3);
  EXPECT_GE(totals.at("sleep").total_seconds, 0.006);
  EXPECT_GE(totals.at("sleep").max_seconds, totals.at("sleep").total_seconds / 3);
  EXPECT_EQ(row_of(profiler.summary(), "sleep").calls, 3);

  profiler.start("step");
  try {
    profiler.start("step");
    FAIL() << "a second start of a running action passed";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("'step' started again before it stopped"), std::string::npos)
        << error.what();
  }
  profiler.stop("step");
  EXPECT_THROW(profiler.stop("step"), Error);
}

// Lightning's profiler="simple": every step, hook, fetch, backward and optimizer step of the fit,
// counted once per call, reported in <log_dir>/fit-profile.txt.
TEST(SimpleProfiler, TimesEveryActionOfAFitAndWritesTheReport) {
  const auto root = scratch("simple");
  testing::TinyModule module;
  auto counter = std::make_shared<BatchCounter>();
  Trainer trainer(
      testing::quiet().default_root_dir(root.string()).max_epochs(2).num_sanity_val_steps(0).profiler("simple"),
      {counter});
  trainer.fit(module, testing::tiny_data(8, 2), testing::tiny_data(4, 2));
  const std::string report = text_of(root / "fit-profile.txt");
  ASSERT_FALSE(report.empty()) << "no fit-profile.txt in " << root;
  const std::map<std::string, int64_t> expected = {
      {"run_training_epoch", 2},
      {"run_training_batch", 8},
      {"[FitLoop].train_dataloader_next", 8},
      {"[TrainModule]TinyModule.training_step", 8},
      {"[TrainModule]TinyModule.on_before_backward", 8},
      {"[Strategy]single_device.backward", 8},
      {"[Trainer].optimizer_step", 8},
      {"[Trainer].zero_grad", 8},
      {"[Callback]Counter.on_train_batch_end", 8},
      {"[TrainModule]TinyModule.on_fit_start", 1},
      {"[TrainModule]TinyModule.validation_step", 4},
      {"[EvaluationLoop].val_next", 4},
  };
  for (const auto& [action, calls] : expected)
    EXPECT_EQ(row_of(report, action).calls, calls) << action << "\n" << report;
  EXPECT_EQ(counter->batches, 8);
  const auto batch = row_of(report, "run_training_batch");
  const auto step = row_of(report, "[TrainModule]TinyModule.training_step");
  EXPECT_GT(step.total_seconds, 0.0);
  EXPECT_LE(step.total_seconds, batch.total_seconds) << "the step runs inside its batch";
  EXPECT_LE(batch.total_seconds, row_of(report, "run_training_epoch").total_seconds);

  trainer.validate(module, testing::tiny_data(4, 2));
  const std::string validation = text_of(root / "validate-profile.txt");
  EXPECT_EQ(row_of(validation, "[TrainModule]TinyModule.validation_step").calls, 2) << validation;
  EXPECT_EQ(row_of(validation, "run_training_batch").calls, -1) << "each stage reports only its own actions";
  fs::remove_all(root);
}

// A Profiler of one's own: it sees each stage's setup, actions nested as the loop runs them, and
// one describe per stage.
class ActionRecorder : public Profiler {
 public:
  void setup(const std::string& stage, const std::string& dirpath, int64_t global_rank) override {
    Profiler::setup(stage, dirpath, global_rank);
    stages.push_back(stage);
  }
  void start(const std::string& action) override { events.push_back("start " + action); }
  void stop(const std::string& action) override { events.push_back("stop " + action); }
  std::string summary() const override { return std::to_string(events.size()) + " events\n"; }
  void describe() override {
    ++described;
    Profiler::describe();
  }
  std::vector<std::string> stages;
  std::vector<std::string> events;
  int described = 0;

 protected:
  void reset() override {}
};

TEST(Profiler, AProfilerOfOnesOwnSeesNestedActionsAndOneDescribePerStage) {
  const auto root = scratch("own");
  auto recorder = std::make_shared<ActionRecorder>();
  testing::TinyModule module;
  Trainer trainer(testing::quiet().default_root_dir(root.string()).max_epochs(1), {}, {}, recorder);
  EXPECT_EQ(trainer.profiler(), recorder.get());
  trainer.fit(module, testing::tiny_data(4, 2));
  trainer.test(module, testing::tiny_data(2, 2));
  EXPECT_EQ(recorder->stages, (std::vector<std::string>{"fit", "test"}));
  EXPECT_EQ(recorder->described, 2);
  const auto at = [&](const std::string& event) {
    return std::find(recorder->events.begin(), recorder->events.end(), event) - recorder->events.begin();
  };
  EXPECT_LT(at("start run_training_batch"), at("start [TrainModule]TinyModule.training_step"));
  EXPECT_LT(at("start [TrainModule]TinyModule.training_step"), at("stop [TrainModule]TinyModule.training_step"));
  EXPECT_LT(at("stop [Trainer].optimizer_step"), at("stop run_training_batch"));
  EXPECT_LT(at("stop run_training_batch"), static_cast<std::ptrdiff_t>(recorder->events.size()));
  EXPECT_EQ(text_of(root / "test-profile.txt"), recorder->summary());

  EXPECT_THROW(Trainer(testing::quiet().profiler("simple"), {}, {}, recorder), Error);
  fs::remove_all(root);
}

// profiler="advanced": LibTorch's operators over a window of training batches and a Chrome trace in
// which Arclight's actions of those batches sit beside the operators.
TEST(AdvancedProfiler, ListsTheWindowsOperatorsAndWritesAChromeTrace) {
  const auto root = scratch("advanced");
  AdvancedProfiler::Options options;
  options.first_batch(1);
  options.batches(2);
  auto profiler = std::make_shared<AdvancedProfiler>(options);
  testing::TinyModule module;
  Trainer trainer(testing::quiet().default_root_dir(root.string()).max_epochs(1), {}, {}, profiler);
  trainer.fit(module, testing::tiny_data(10, 2));
  const std::string report = text_of(root / "fit-profile.txt");
  EXPECT_EQ(row_of(report, "run_training_batch").calls, 5) << report;
  EXPECT_NE(report.find("LibTorch operators over 2 training batch(es) from batch 1"), std::string::npos) << report;
  EXPECT_NE(report.find("| aten::mse_loss "), std::string::npos) << report;
  ASSERT_EQ(profiler->trace_path(), (root / "fit-trace.json").string());
  const auto trace = nlohmann::json::parse(text_of(profiler->trace_path()));
  int64_t batches = 0, operators = 0;
  for (const auto& event : trace.at("traceEvents")) {
    EXPECT_EQ(event.at("ph"), "X");
    EXPECT_GE(event.at("ts").get<double>(), 0.0);
    if (event.at("name") == "run_training_batch") ++batches;
    if (event.at("cat") == "operator") ++operators;
  }
  EXPECT_EQ(batches, 2) << "the window holds its two batches";
  EXPECT_GT(operators, 10);
  fs::remove_all(root);
}

TEST(Profiler, TheOptionTakesSimpleOrAdvancedAndNamesTheChoices) {
  EXPECT_EQ(TrainerOptions::from_json({{"profiler", "simple"}}).profiler().name, "simple");
  EXPECT_EQ(TrainerOptions::from_json({{"profiler", "advanced"}}).to_json()["profiler"], "advanced");
  try {
    TrainerOptions::from_json({{"profiler", "simpel"}});
    FAIL() << "profiler=simpel passed";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("simpel"), std::string::npos) << message;
    EXPECT_NE(message.find("did you mean 'simple'"), std::string::npos) << message;
  }
  EXPECT_EQ(make_profiler(""), nullptr);
  EXPECT_NE(dynamic_cast<AdvancedProfiler*>(make_profiler("advanced").get()), nullptr);
  // Lightning's "pytorch" is LibTorch's operator profiler, "advanced" here.
  EXPECT_EQ(TrainerOptions::from_json({{"profiler", "pytorch"}}).to_json()["profiler"], "pytorch");
  EXPECT_NE(dynamic_cast<AdvancedProfiler*>(make_profiler("pytorch").get()), nullptr);
}

std::string profiler_error(const nlohmann::json& profiler) {
  try {
    TrainerOptions::from_json({{"profiler", profiler}});
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// Lightning's profiler classes, as LightningCLI configs give them, with their dirpath and filename;
// init_args without a counterpart are taken at Lightning's defaults only.
TEST(Profiler, LightningsProfilerClassesSayWhereTheReportGoes) {
  const auto simple =
      TrainerOptions::from_json({{"profiler",
                                  {{"class_path", "lightning.pytorch.profilers.SimpleProfiler"},
                                   {"init_args", {{"dirpath", "/tmp/p"}, {"filename", "perf"}, {"extended", true}}}}}});
  EXPECT_EQ(simple.profiler().name, "simple");
  EXPECT_EQ(simple.profiler().dirpath, "/tmp/p");
  EXPECT_EQ(simple.profiler().filename, "perf");
  EXPECT_EQ(TrainerOptions::from_json(simple.to_json()).to_json(), simple.to_json());
  EXPECT_EQ(simple.to_json()["profiler"]["class_path"], "SimpleProfiler");
  const auto pytorch = TrainerOptions::from_json(
      {{"profiler", {{"class_path", "PyTorchProfiler"}, {"row_limit", 3}, {"export_to_chrome", false}}}});
  EXPECT_EQ(pytorch.profiler().name, "advanced");
  EXPECT_EQ(pytorch.profiler().row_limit, 3);
  EXPECT_FALSE(pytorch.profiler().chrome_trace);
  EXPECT_EQ(TrainerOptions::from_json(pytorch.to_json()).to_json(), pytorch.to_json());
  EXPECT_EQ(TrainerOptions::from_json({{"profiler", "AdvancedProfiler"}}).profiler().name, "advanced");
  EXPECT_EQ(TrainerOptions::from_json({{"profiler", "SimpleProfiler"}}).to_json()["profiler"], "simple");
  EXPECT_EQ(TrainerOptions::from_json({{"profiler", "PassThroughProfiler"}}).profiler().name, "");

  EXPECT_NE(profiler_error({{"class_path", "SimpleProfiler"}, {"init_args", {{"extended", false}}}})
                .find("SimpleProfiler's extended=false has no counterpart here; leave it at true"),
            std::string::npos);
  EXPECT_NE(profiler_error({{"class_path", "PyTorchProfiler"}, {"emit_nvtx", true}})
                .find("trainer.profiler.init_args.emit_nvtx (PyTorchProfiler): PyTorchProfiler's emit_nvtx=true"),
            std::string::npos);
  EXPECT_NE(profiler_error({{"class_path", "SimpleProfiler"}, {"filenme", "x"}})
                .find("unknown config key 'trainer.profiler.init_args.filenme'; did you mean 'filename'?"),
            std::string::npos);
  EXPECT_NE(profiler_error("XLAProfiler").find("unknown profiler class 'XLAProfiler'"), std::string::npos);
  EXPECT_NE(profiler_error(3).find("'trainer.profiler' must be a profiler's name"), std::string::npos);
  ProfilerSpec simple_rows("simple");
  simple_rows.row_limit = 3;
  EXPECT_THROW(TrainerOptions().profiler(simple_rows).validate(), Error);
  ProfilerSpec nameless;
  nameless.filename = "perf";
  EXPECT_THROW(TrainerOptions().profiler(nameless).validate(), Error);
}

// The report goes to <dirpath>/<stage>-<filename>.txt; PyTorchProfiler's row_limit and export_to_chrome
// reach the operator table and the trace.
TEST(Profiler, AClassesDirpathFilenameAndRowLimitShapeTheReports) {
  const auto root = scratch("classes");
  testing::TinyModule module;
  const auto fit = [&](const nlohmann::json& profiler) {
    auto options = TrainerOptions::from_json({{"profiler", profiler}});
    Trainer trainer(testing::quiet().default_root_dir(root.string()).max_epochs(1).profiler(options.profiler()));
    trainer.fit(module, testing::tiny_data(10, 2));
  };
  fit({{"class_path", "SimpleProfiler"}, {"dirpath", (root / "reports").string()}, {"filename", "perf"}});
  EXPECT_EQ(row_of(text_of(root / "reports" / "fit-perf.txt"), "run_training_batch").calls, 5);
  EXPECT_FALSE(fs::exists(root / "fit-profile.txt"));

  fit({{"class_path", "PyTorchProfiler"}, {"filename", "ops"}, {"row_limit", 2}, {"export_to_chrome", false}});
  const std::string report = text_of(root / "fit-ops.txt");
  ASSERT_NE(report.find("LibTorch operators over"), std::string::npos) << report;
  const auto table = report.substr(report.find("LibTorch operators over"));
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 4) << "heading, header and two rows:\n" << table;
  EXPECT_EQ(report.find("Chrome trace"), std::string::npos) << report;
  for (const auto& entry : fs::directory_iterator(root))
    EXPECT_EQ(entry.path().extension(), entry.is_directory() ? "" : ".txt") << entry.path();

  fit({{"class_path", "PyTorchProfiler"}, {"filename", "ops"}});
  EXPECT_TRUE(fs::exists(root / "fit-ops-trace.json"));
  fs::remove_all(root);
}

}  // namespace
}  // namespace arc
