// Checkpoints written in the background (async_checkpointing): the same bytes as a synchronous
// save at the same step while training goes on, exact resume, kill safety, failures that end fit.
#include "support/tiny_module.h"

#include "support/command.h"
#include "support/errors.h"
#include "support/scratch.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

extern char** environ;

namespace arc {
namespace {

namespace fs = std::filesystem;
using testing::fresh_folder;
using testing::occurrences;
using testing::quiet;

// A regression with a 2048 x 2048 layer (16 MB, and as much SGD momentum): a file that takes a
// while to write, while each step changes every weight.
class Wide : public TrainModule {
 public:
  Wide() : TrainModule("Wide") {
    torch::manual_seed(11);
    hidden = register_module("hidden", torch::nn::Linear(2048, 2048));
    out = register_module("out", torch::nn::Linear(2048, 1));
  }
  torch::Tensor training_step(Batch& batch, int64_t) override {
    return torch::mse_loss(out(torch::tanh(hidden(batch[0]))), batch[1]);
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    auto sgd = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    return {OptimizerConfig(sgd, SchedulerConfig{std::make_shared<StepLR>(*sgd, 3, 0.7), Interval::step, 1, ""})};
  }
  torch::nn::Linear hidden{nullptr}, out{nullptr};
};

// 64 samples of 2048 features, shuffled by the Trainer's seed: 8 batches an epoch.
DataSource wide_data() {
  const auto generator = at::detail::createCPUGenerator(5);
  auto x = at::randn({64, 2048}, generator);
  auto y = x.slice(1, 0, 8).sum(1, true);
  DataSource data{std::make_shared<TensorDataset>(std::vector<torch::Tensor>{x, y}), DataLoaderOptions(8)};
  data.options.shuffle(true);
  return data;
}

TrainerOptions wide_options() { return quiet().max_epochs(2).seed(3); }

std::shared_ptr<ModelCheckpoint> saving_every(int64_t steps, const std::string& dir, bool in_background) {
  return std::make_shared<ModelCheckpoint>(ModelCheckpointOptions()
                                               .dirpath(dir)
                                               .filename("{step}")
                                               .save_top_k(-1)
                                               .every_n_train_steps(steps)
                                               .async_checkpointing(in_background));
}

// Runs right after ModelCheckpoint's save: notes whether its file is still being written, fills
// every weight with NaN (which a write from the live tensors would store), puts them back, and
// saves the same step synchronously for comparison.
class Scribbler : public Callback {
 public:
  Scribbler(int64_t every, std::string dir) : every_(every), dir_(std::move(dir)) {}
  std::string state_key() const override { return "Scribbler"; }
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor&, Batch&, int64_t) override {
    const int64_t step = trainer.global_step();
    if (step % every_ != 0) return;
    still_writing.push_back(!fs::exists(dir_ + "/step=" + std::to_string(step) + ".ckpt"));
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> kept;
    for (auto& p : module.parameters()) {
      kept.push_back(p.clone());
      p.fill_(NAN);
    }
    for (size_t i = 0; i < kept.size(); ++i) module.parameters()[i].copy_(kept[i]);
    trainer.save_checkpoint(dir_ + "/sync_step=" + std::to_string(step) + ".ckpt", false, false);
  }
  std::vector<bool> still_writing;

 private:
  int64_t every_;
  std::string dir_;
};

void expect_same_tensors(const std::string& a, const std::string& b) {
  const CheckpointReader first(a), second(b);
  ASSERT_EQ(first.tensor_names(), second.tensor_names());
  EXPECT_GT(first.tensor_names().size(), 5u);
  for (const auto& name : first.tensor_names()) {
    const auto x = first.tensor(name), y = second.tensor(name);
    EXPECT_TRUE(x.sizes() == y.sizes() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0)
        << name << " differs between " << a << " and " << b;
  }
}

// The background file of each step holds, bit for bit, what a synchronous save of that step holds,
// although every weight was overwritten while it was being written and training went on; and
// training itself is the same as with synchronous saves.
TEST(AsyncCheckpoint, FileEqualsASynchronousSaveOfTheStepWhileTheWeightsChange) {
  const auto dir = fresh_folder("equal");
  Wide module;
  auto scribbler = std::make_shared<Scribbler>(4, dir);
  Trainer trainer(wide_options(), {saving_every(4, dir, true), scribbler});
  trainer.fit(module, wide_data());
  ASSERT_EQ(trainer.global_step(), 16);
  // Each save returns long before its 32 MB are written, unless this thread is preempted that long.
  EXPECT_GE(std::count(scribbler->still_writing.begin(), scribbler->still_writing.end(), true), 1)
      << "no save returned before its write";
  for (int step = 4; step <= 16; step += 4)
    expect_same_tensors(dir + "/step=" + std::to_string(step) + ".ckpt",
                        dir + "/sync_step=" + std::to_string(step) + ".ckpt");

  const auto sync_dir = fresh_folder("equal_sync");
  Wide reference;
  Trainer(wide_options(), {saving_every(4, sync_dir, false)}).fit(reference, wide_data());
  EXPECT_TRUE(torch::equal(testing::weights_of(module), testing::weights_of(reference)));
  fs::remove_all(dir);
  fs::remove_all(sync_dir);
}

// Resuming from a file written in the background ends where the uninterrupted run ends, bit for bit.
TEST(AsyncCheckpoint, ResumingFromABackgroundFileEndsBitIdentical) {
  const auto dir = fresh_folder("resume");
  Wide uninterrupted;
  Trainer(wide_options(), {saving_every(4, dir, true)}).fit(uninterrupted, wide_data());
  for (const int step : {4, 12}) {
    Wide resumed;
    Trainer trainer(wide_options());
    trainer.fit(resumed, wide_data(), {}, dir + "/step=" + std::to_string(step) + ".ckpt");
    EXPECT_EQ(trainer.global_step(), 16);
    EXPECT_TRUE(torch::equal(testing::weights_of(resumed), testing::weights_of(uninterrupted))) << "step " << step;
  }
  fs::remove_all(dir);
}

// One write at a time: a save of other data waits for the write in flight (and says so, once); a
// save of the same data (another file of the same step) is written from the same copy, with its own
// metadata; later changes to the tensors never reach a file. Whether a save finds the 64 MB write
// before it still under way depends on the scheduler (almost always; not when this thread is preempted
// for as long as the write takes), so three fresh writers try, and one must have waited.
TEST(AsyncCheckpoint, OneWriteInFlightAndAFileOfTheSameDataJoinsIt) {
  const auto dir = fresh_folder("writer");
  int waited = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto weights = torch::full({16 << 20}, 1.0f);  // 64 MB
    AsyncCheckpointWriter background;
    const auto save = [&](int64_t n, const std::string& name) {
      CheckpointWriter writer(nlohmann::json{{"n", n}});
      writer.add("w", weights);
      background.save(std::move(writer), dir + "/" + name);
    };
    ::testing::internal::CaptureStderr();
    save(1, "a.ckpt");
    weights[0].fill_(2.0f);
    save(2, "b.ckpt");  // other data: waits for a.ckpt
    save(3, "c.ckpt");  // the same data as b.ckpt: joins its write
    weights[1].fill_(3.0f);
    save(4, "d.ckpt");  // waits again, without saying so again
    weights.fill_(4.0f);
    background.wait();
    const auto said = ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(background.failed());
    const auto value_at = [&](const std::string& name, int64_t index) {
      return CheckpointReader(dir + "/" + name).tensor("w")[index].item<float>();
    };
    EXPECT_EQ(value_at("a.ckpt", 0), 1.0f);
    EXPECT_EQ(value_at("b.ckpt", 0), 2.0f);
    EXPECT_EQ(value_at("c.ckpt", 0), 2.0f);
    EXPECT_EQ(value_at("c.ckpt", 1), 1.0f);
    EXPECT_EQ(value_at("d.ckpt", 1), 3.0f);
    EXPECT_EQ(value_at("d.ckpt", 2), 1.0f);
    EXPECT_EQ(CheckpointReader::read_meta(dir + "/c.ckpt").at("n"), 3);
    const auto waits = occurrences(said, "waits for the background write");
    EXPECT_LE(waits, 1) << said;
    if (waits == 1) {
      EXPECT_NE(said.find("checkpoint '" + dir + "/b.ckpt' waits for the background write of '" + dir + "/a.ckpt'"),
                std::string::npos)
          << said;
    }
    waited += static_cast<int>(waits);
  }
  EXPECT_GE(waited, 1);
  fs::remove_all(dir);
}

// then(): an action runs once the files asked for before it are written (on the writing thread, or at
// once when none is pending), and not at all behind a write that failed; link_checkpoint makes the
// relative link that ModelCheckpoint's save_last "link" keeps.
TEST(AsyncCheckpoint, ActionsWaitForTheWritesBeforeThemAndSkipThoseBehindAFailure) {
  const auto dir = fresh_folder("then");
  const auto weights = torch::full({4 << 20}, 1.0f);  // 16 MB
  const auto checkpoint = [&] {
    CheckpointWriter writer(nlohmann::json::object());
    writer.add("w", weights);
    return writer;
  };
  AsyncCheckpointWriter background;
  std::vector<bool> existed;
  background.then([&] { existed.push_back(true); });  // nothing pending: at once
  EXPECT_EQ(existed, std::vector<bool>{true});
  background.save(checkpoint(), dir + "/a.ckpt");
  background.then([&] {
    existed.push_back(fs::exists(dir + "/a.ckpt"));
    link_checkpoint(dir + "/a.ckpt", dir + "/last.ckpt");
  });
  background.wait();
  EXPECT_EQ(existed, (std::vector<bool>{true, true}));
  EXPECT_EQ(fs::read_symlink(dir + "/last.ckpt"), "a.ckpt");
  EXPECT_TRUE(torch::equal(CheckpointReader(dir + "/last.ckpt").tensor("w"), weights));
  // A link replaces a file at once, and a file the link.
  CheckpointWriter(checkpoint()).write(dir + "/b.ckpt");
  link_checkpoint(dir + "/b.ckpt", dir + "/last.ckpt");
  EXPECT_EQ(fs::read_symlink(dir + "/last.ckpt"), "b.ckpt");
  CheckpointWriter(checkpoint()).write(dir + "/last.ckpt");
  EXPECT_FALSE(fs::is_symlink(dir + "/last.ckpt"));
  EXPECT_TRUE(fs::exists(dir + "/b.ckpt"));
  // Behind a write that fails (its folder would be a file), the action is skipped.
  bool ran = false;
  background.save(checkpoint(), dir + "/b.ckpt/c.ckpt");
  background.then([&] { ran = true; });
  background.wait();
  EXPECT_FALSE(ran);
  EXPECT_TRUE(background.take_failure().has_value());
  fs::remove_all(dir);
}

// SIGKILL while a background write is under way, many times: the file at the path is always a
// complete checkpoint of one generation, never of the weights overwritten after the save returned.
TEST(AsyncCheckpoint, KilledDuringABackgroundWriteLeavesThePreviousCheckpointLoadable) {
  const auto dir = fresh_folder("kill");
  const std::string path = dir + "/last.ckpt";
  std::mt19937 random(std::random_device{}());
  for (int round = 0; round < 6; ++round) {
    pid_t pid = 0;
    std::vector<char*> argv = {const_cast<char*>(ARC_CHECKPOINT_WRITER), const_cast<char*>(path.c_str()),
                               const_cast<char*>("--async"), nullptr};
    ASSERT_EQ(posix_spawn(&pid, ARC_CHECKPOINT_WRITER, nullptr, nullptr, argv.data(), environ), 0);
    const std::string temporary = path + kTemporaryInfix + std::to_string(pid);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!fs::exists(path) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 300)(random)));
    while (!fs::exists(temporary) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    const bool writing = fs::exists(temporary);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    EXPECT_TRUE(writing) << "no background write was under way when killed";
    const CheckpointReader checkpoint(path);
    torch::nn::Linear model(2048, 4096);
    checkpoint.load_module(*model);
    const auto generation = checkpoint.meta().at("generation").get<int64_t>();
    EXPECT_GE(generation, 0);
    EXPECT_TRUE(torch::all(model->weight == static_cast<float>(generation)).item<bool>()) << "round " << round;
    remove_stale_temporaries(dir);
    EXPECT_FALSE(fs::exists(temporary));
  }
  fs::remove_all(dir);
}

// Sleeps after each batch, so that a run of many batches lasts seconds.
class SlowBatches : public Callback {
 public:
  std::string state_key() const override { return "SlowBatches"; }
  void on_train_batch_end(Trainer&, TrainModule&, const torch::Tensor&, Batch&, int64_t) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
};

// A background write that fails (its folder cannot be made) ends fit at a following batch with
// the file, the cause and the fix; a failed last write ends fit as it returns.
TEST(AsyncCheckpoint, AFailedBackgroundWriteFailsFitWithThePathAndTheCause) {
  const auto dir = fresh_folder("failed");
  std::ofstream(dir + "/file") << "not a folder";
  const std::string expected =
      "checkpoint written in the background (async_checkpointing) failed on rank 0: cannot create the folder "
      "of checkpoint '" +
      dir + "/file/checkpoints/";
  {
    testing::TinyModule module;
    auto checkpoints = std::make_shared<ModelCheckpoint>(
        ModelCheckpointOptions().dirpath(dir + "/file/checkpoints").every_n_train_steps(2).save_top_k(-1));
    Trainer trainer(quiet().max_epochs(100).async_checkpointing(true), {checkpoints, std::make_shared<SlowBatches>()});
    const auto message = testing::error_of([&] { trainer.fit(module, testing::tiny_data(80, 4)); });
    EXPECT_NE(message.find("fit stopped at global step "), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << message;
    EXPECT_NE(message.find("save elsewhere"), std::string::npos) << message;
    EXPECT_LT(module.counts["training_step"], 2000);
  }
  {
    testing::TinyModule module;
    Trainer trainer(quiet().max_epochs(1).async_checkpointing(true),
                    {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions().dirpath(dir + "/file/checkpoints"))});
    const auto message = testing::error_of([&] { trainer.fit(module, testing::tiny_data(16, 4)); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
  testing::TinyModule module;
  Trainer trainer(quiet().max_epochs(1));
  trainer.fit(module, testing::tiny_data(16, 4));
  const auto message = testing::error_of([&] { trainer.save_checkpoint(dir + "/after.ckpt", false, true); });
  EXPECT_NE(message.find("in the background needs a running fit"), std::string::npos) << message;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace arc
