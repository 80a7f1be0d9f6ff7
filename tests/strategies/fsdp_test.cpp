// Strategy fsdp: sharded training gives DDP's bits (shared memory), holds the bytes it says, and its
// checkpoints are whole: they resume at another world size, and under DDP.
#include "strategies/ddp_support.h"

#include <arc/fabric/checkpoint.h>
#include <arc/fabric/sharded_checkpoint.h>
#include <arc/strategies/sharded_reducer.h>

#include <support/errors.h>
#include <support/thread_ranks.h>

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

namespace {

using namespace arc::testing::ddp;

// The final weights of a run with `args` (rank 0's, as floats); the run must succeed.
std::vector<float> trained(const std::string& args, const std::string& name) {
  const auto out = scratch_path(name);
  const auto run = probe(args + " --out " + out);
  EXPECT_EQ(run.status, 0) << args << "\n" << run.output;
  auto weights = read_floats(out);
  std::remove(out.c_str());
  EXPECT_FALSE(weights.empty()) << args;
  return weights;
}

// Each rank's "HELD <rank> <gradient bytes> <optimizer state bytes> <parameter bytes>", by rank.
using Held = std::map<int, std::tuple<int64_t, int64_t, int64_t>>;
Held held(const CommandRun& run) {
  Held out;
  const std::regex line("HELD (\\d+) (\\d+) (\\d+) (\\d+)");
  for (std::sregex_iterator it(run.output.begin(), run.output.end(), line), end; it != end; ++it)
    out[std::stoi((*it)[1])] = {std::stoll((*it)[2]), std::stoll((*it)[3]), std::stoll((*it)[4])};
  return out;
}

// Each sharding against DDP, with each optimizer, gradient accumulation and clipping by norm (a
// bound that clips), on units of one parameter each, at world sizes 2 and 3: the same bits.
TEST(FSDP, ShardedTrainingMatchesDdpBitForBit) {
  for (const char* optimizer : {"sgd", "adam", "adamw"}) {
    const std::string common = std::string(" --steps 12 --accumulate 2 --clip 0.05 --bucket-mb 0.0001 --optimizer ") +
                               optimizer + " --devices 2";
    const auto ddp = trained("--strategy ddp_spawn" + common, "ddp");
    for (const char* sharding : {"SHARD_GRAD_OP", "SHARD_OPTIMIZER", "FULL_SHARD"})
      EXPECT_EQ(trained("--strategy fsdp --sharding " + std::string(sharding) + common, "fsdp"), ddp)
          << optimizer << " " << sharding;
  }
  const std::string three = " --steps 10 --optimizer adamw --clip 0.05 --devices 3";
  const auto ddp3 = trained("--strategy ddp_spawn" + three, "ddp3");
  EXPECT_EQ(trained("--strategy fsdp" + three, "fsdp3"), ddp3);
  EXPECT_EQ(trained("--strategy fsdp --sharding FULL_SHARD" + three, "full3"), ddp3);
  const std::string by_value = " --steps 10 --clip 0.01 --clip-algorithm value --devices 2";
  const auto ddp_value = trained("--strategy ddp_spawn" + by_value, "ddp_v");
  EXPECT_EQ(trained("--strategy fsdp" + by_value, "fsdp_value"), ddp_value);
  EXPECT_EQ(trained("--strategy fsdp --sharding FULL_SHARD" + by_value, "full_value"), ddp_value);
}

// The same where the trainable parameters change (a backbone unfrozen at epoch 1, two optimizers
// toggled under manual optimization: owners stay, so no optimizer state moves), under bf16-mixed, and
// in a loop of one's own on arc::Fabric.
TEST(FSDP, FinetuningTogglingMixedPrecisionAndFabricMatchDdp) {
  for (const std::string args : {" --steps 40 --finetune 1", " --steps 30 --toggle 1",
                                 " --steps 20 --precision bf16-mixed --optimizer adam", " --steps 20 --loop custom"}) {
    SCOPED_TRACE(args);
    const auto ddp = trained("--strategy ddp_spawn --devices 2" + args, "ddp");
    EXPECT_EQ(trained("--strategy fsdp --devices 2" + args, "fsdp"), ddp);
    EXPECT_EQ(trained("--strategy fsdp --sharding FULL_SHARD --devices 2" + args, "full"), ddp);
  }
}

// With the units' gathers started ahead (Gloo runs collectives on its own threads; shared memory
// here has no helper thread), in forward and at either point of backward: DDP's bits still.
TEST(FSDP, GathersStartedAheadKeepDdpsBits) {
  const std::string common = " --steps 12 --optimizer adam --clip 0.05 --devices 2 --shared-memory 0";
  const auto ddp = trained("--strategy ddp_spawn" + common, "ddp");
  for (const std::string ahead : {" --forward-prefetch 1", " --backward-prefetch BACKWARD_POST"}) {
    const auto run =
        probe("--strategy fsdp --sharding FULL_SHARD" + common + ahead + " --out " + scratch_path("ahead"));
    ASSERT_EQ(run.status, 0) << run.output;
    EXPECT_NE(run.output.find("gathers start ahead"), std::string::npos) << run.output;
    EXPECT_EQ(read_floats(scratch_path("ahead")), ddp) << ahead;
  }
}

// What each rank holds after training, to the byte: the probe's model is fc1 (8x16 weight, 16 bias)
// and fc2 (16x3, 3), 195 floats, each layer an arc::ShardedUnit; rank 0 owns fc1's weight (128
// floats), rank 1 the rest (67). DDP holds every parameter, gradient and state on each rank;
// SHARD_OPTIMIZER every parameter and gradient, its own states; SHARD_GRAD_OP every parameter, its own
// gradients and states; FULL_SHARD its own of all three. Adam keeps two moments per element.
TEST(FSDP, EachRankHoldsTheBytesOfWhatItOwns) {
  const auto held_by = [](const std::string& args) {
    const auto run = probe(args + " --steps 4 --devices 2");
    EXPECT_EQ(run.status, 0) << run.output;
    return held(run);
  };
  EXPECT_EQ(held_by("--strategy ddp_spawn --optimizer adam"), (Held{{0, {780, 1560, 780}}, {1, {780, 1560, 780}}}));
  EXPECT_EQ(held_by("--strategy fsdp --sharding SHARD_OPTIMIZER --optimizer adam"),
            (Held{{0, {780, 1024, 780}}, {1, {780, 536, 780}}}));
  EXPECT_EQ(held_by("--strategy fsdp --optimizer adam"), (Held{{0, {512, 1024, 780}}, {1, {268, 536, 780}}}));
  EXPECT_EQ(held_by("--strategy fsdp"), (Held{{0, {512, 512, 780}}, {1, {268, 268, 780}}}));
  EXPECT_EQ(held_by("--strategy fsdp --sharding FULL_SHARD --optimizer adam"),
            (Held{{0, {512, 1024, 512}}, {1, {268, 536, 268}}}));
  // Parameters outside every unit (SyncBatchNorm's weight and bias, 16 floats each, both rank 1's)
  // stay whole on every rank: rank 0 holds them beside its 128 floats.
  EXPECT_EQ(held_by("--strategy fsdp --sharding FULL_SHARD --batchnorm 1"),
            (Held{{0, {512, 512, 640}}, {1, {396, 396, 396}}}));
}

// The checkpoint in `folder`'s checkpoints folder (a file, or a sharded one's folder).
std::string checkpoint_in(const std::string& folder) {
  for (const auto& entry : std::filesystem::directory_iterator(folder + "/checkpoints")) return entry.path().string();
  return "";
}

std::vector<std::string> names_in(const std::string& folder) {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) out.push_back(entry.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

// A checkpoint of a sharded run holds the whole optimizer state, as DDP's does, to the bit; it
// resumes at another world size and under DDP as DDP's own checkpoint does.
TEST(FSDP, CheckpointsAreWholeAndResumeAtAnotherWorldSize) {
  const auto root = scratch_path("fsdp_ckpt"), ddp_root = scratch_path("ddp_ckpt");
  for (const auto& folder : {root, ddp_root}) std::filesystem::remove_all(folder);
  const std::string common = " --devices 2 --optimizer adam --steps 6 --checkpoints.every 6 --root ";
  const auto sharded = probe("--strategy fsdp" + common + root);
  ASSERT_EQ(sharded.status, 0) << sharded.output;
  const auto ddp = probe("--strategy ddp_spawn" + common + ddp_root);
  ASSERT_EQ(ddp.status, 0) << ddp.output;
  const auto full_root = scratch_path("full_ckpt");
  std::filesystem::remove_all(full_root);
  const auto full = probe("--strategy fsdp --sharding FULL_SHARD" + common + full_root);
  ASSERT_EQ(full.status, 0) << full.output;
  const arc::CheckpointReader a(checkpoint_in(root)), b(checkpoint_in(ddp_root)), c(checkpoint_in(full_root));
  ASSERT_EQ(a.tensor_names(), b.tensor_names());
  ASSERT_EQ(c.tensor_names(), b.tensor_names());
  bool has_moments = false;
  for (const auto& name : a.tensor_names()) {
    EXPECT_TRUE(torch::equal(a.tensor(name), b.tensor(name))) << name;
    EXPECT_TRUE(torch::equal(c.tensor(name), b.tensor(name))) << "FULL_SHARD's " << name;
    has_moments = has_moments || name.find("exp_avg_sq") != std::string::npos;
  }
  EXPECT_TRUE(has_moments);
  EXPECT_EQ(a.json("optimizer_0"), b.json("optimizer_0"));
  // On three ranks, from the two-rank files: fsdp from fsdp's, DDP from DDP's.
  const std::string more = " --devices 3 --optimizer adam --steps 10 --ckpt-path ";
  EXPECT_EQ(trained("--strategy fsdp" + more + checkpoint_in(root), "resumed_fsdp"),
            trained("--strategy ddp_spawn" + more + checkpoint_in(ddp_root), "resumed_ddp"));
  // DDP from fsdp's file; FULL_SHARD from DDP's.
  const auto ddp_again = trained("--strategy ddp_spawn" + more + checkpoint_in(ddp_root), "ddp_again");
  EXPECT_EQ(trained("--strategy ddp_spawn" + more + checkpoint_in(root), "ddp_from_fsdp"), ddp_again);
  EXPECT_EQ(trained("--strategy fsdp --sharding FULL_SHARD" + more + checkpoint_in(ddp_root), "full_from_ddp"),
            ddp_again);
  for (const auto& folder : {root, ddp_root, full_root}) std::filesystem::remove_all(folder);
}

// state_dict_type "sharded": every rank writes what it owns into the checkpoint's folder; together
// the shards are DDP's file, tensor for tensor; the folder resumes at world 3 under fsdp and DDP as
// DDP's file does, consolidates into one file, and saving again leaves one set. Fabric's loop saves
// and resumes through one too.
TEST(FSDP, ShardedCheckpointsHoldEachRanksShareAndResumeAtAnyWorldSize) {
  const auto root = scratch_path("sharded_ckpt"), ddp_root = scratch_path("ddp_ckpt");
  for (const auto& folder : {root, ddp_root}) std::filesystem::remove_all(folder);
  const std::string sharded_fsdp = "--strategy fsdp --sharding FULL_SHARD --state-dict-type sharded";
  const std::string common = " --devices 2 --optimizer adam --steps 6 --accumulate 2 --checkpoints.every 3 --root ";
  const auto sharded = probe(sharded_fsdp + common + root);
  ASSERT_EQ(sharded.status, 0) << sharded.output;
  const auto ddp = probe("--strategy ddp_spawn" + common + ddp_root);
  ASSERT_EQ(ddp.status, 0) << ddp.output;
  const auto folder = checkpoint_in(root);
  ASSERT_TRUE(std::filesystem::is_directory(folder)) << folder;
  // The save at step 3 was replaced by the one at step 6 (save_top_k 1): one set, nothing else.
  EXPECT_EQ(names_in(root + "/checkpoints").size(), 1u);
  const auto index = arc::read_sharded_index(folder);
  ASSERT_EQ(index.shards.size(), 2u);
  EXPECT_EQ(names_in(folder).size(), 3u);
  EXPECT_EQ(index.meta.at("global_step"), 6);
  // Rank 0 owns fc1's weight, rank 1 the rest (as the bytes test says).
  const arc::CheckpointReader rank0(index.shards[0]), rank1(index.shards[1]);
  EXPECT_TRUE(rank0.contains("model/fc1.weight") && !rank1.contains("model/fc1.weight"));
  EXPECT_TRUE(rank1.contains("model/fc2.weight") && !rank0.contains("model/fc2.weight"));
  EXPECT_TRUE(rank1.contains("optimizer_0/3/exp_avg_sq") && !rank0.contains("optimizer_0/3/exp_avg_sq"));
  const arc::CheckpointReader whole(folder), ddp_file(checkpoint_in(ddp_root));
  ASSERT_EQ(whole.tensor_names(), ddp_file.tensor_names());
  for (const auto& name : whole.tensor_names()) EXPECT_TRUE(torch::equal(whole.tensor(name), ddp_file.tensor(name)));
  EXPECT_EQ(whole.json("optimizer_0"), ddp_file.json("optimizer_0"));
  // One file of the folder holds the same.
  const auto consolidated = root + "/whole.ckpt";
  arc::consolidate_checkpoint(folder, consolidated);
  const arc::CheckpointReader one(consolidated);
  ASSERT_EQ(one.tensor_names(), ddp_file.tensor_names());
  for (const auto& name : one.tensor_names()) EXPECT_TRUE(torch::equal(one.tensor(name), ddp_file.tensor(name)));
  EXPECT_EQ(one.meta(), whole.meta());
  const std::string more = " --devices 3 --optimizer adam --steps 10 --ckpt-path ";
  const auto ddp_resumed = trained("--strategy ddp_spawn" + more + checkpoint_in(ddp_root), "ddp_resumed");
  EXPECT_EQ(trained(sharded_fsdp + more + folder, "sharded_resumed"), ddp_resumed);
  EXPECT_EQ(trained("--strategy ddp_spawn" + more + folder, "ddp_from_sharded"), ddp_resumed);
  EXPECT_EQ(trained("--strategy fsdp" + more + consolidated, "fsdp_from_consolidated"), ddp_resumed);
  // Fabric::save and load in a loop of one's own.
  const auto fabric_state = root + "/fabric.ckpt";
  const std::string loop = sharded_fsdp + " --loop custom --devices 2 --steps 12";
  const auto uninterrupted = trained(loop + " --custom.save-at 5 --custom.state " + fabric_state, "uninterrupted");
  ASSERT_TRUE(std::filesystem::is_directory(fabric_state));
  EXPECT_EQ(trained(loop + " --custom.resume " + fabric_state, "fabric_resumed"), uninterrupted);
  for (const auto& folder : {root, ddp_root}) std::filesystem::remove_all(folder);
}

// ModelCheckpoint's save_last "link" makes last.ckpt a link to a kept set: a sharded save at that
// name replaces the link and leaves the set it linked to as it was, and removing the link removes
// only the link.
TEST(ShardedCheckpoint, ASaveAtALinksNameReplacesTheLinkNotTheSetItLinksTo) {
  const auto root = scratch_path("linked_set");
  std::filesystem::remove_all(root);
  const auto save = [&](const std::string& path, double value) {
    arc::testing::on_ranks(2, {}, [&](int64_t rank, arc::Collectives& group) {
      arc::CheckpointWriter shard(rank == 0 ? nlohmann::json{{"value", value}} : nlohmann::json{{"shard", rank}});
      shard.add("model/w" + std::to_string(rank), torch::full({4}, value));
      arc::write_sharded_checkpoint(shard, path, group);
    });
  };
  save(root + "/kept.ckpt", 1.0);
  arc::link_checkpoint(root + "/kept.ckpt", root + "/last.ckpt");
  EXPECT_EQ(arc::CheckpointReader(root + "/last.ckpt").meta().at("value"), 1.0);
  save(root + "/last.ckpt", 2.0);
  EXPECT_FALSE(std::filesystem::is_symlink(root + "/last.ckpt"));
  EXPECT_EQ(arc::CheckpointReader(root + "/last.ckpt").meta().at("value"), 2.0);
  EXPECT_EQ(arc::CheckpointReader(root + "/kept.ckpt").meta().at("value"), 1.0);
  arc::link_checkpoint(root + "/kept.ckpt", root + "/last.ckpt");  // a folder's place taken by a link
  EXPECT_EQ(std::filesystem::read_symlink(root + "/last.ckpt"), "kept.ckpt");
  arc::remove_checkpoint(root + "/last.ckpt");
  EXPECT_FALSE(std::filesystem::exists(root + "/last.ckpt"));
  EXPECT_TRUE(torch::equal(arc::CheckpointReader(root + "/kept.ckpt").tensor("model/w1"), torch::full({4}, 1.0)));
  std::filesystem::remove_all(root);
}

// A save that fails on one rank is an error on every rank naming it, and leaves the set before;
// shards of a save killed before its index lie beside the set, which reads as before, and the next
// save removes them. Without its index a folder is no checkpoint.
TEST(ShardedCheckpoint, AFailedOrInterruptedSaveLeavesThePreviousSet) {
  const auto folder = scratch_path("atomic_set");
  std::filesystem::remove_all(folder);
  const auto save = [&](int64_t step, int64_t failing_rank) {
    std::vector<std::string> errors(2);
    arc::testing::on_ranks(2, {}, [&](int64_t rank, arc::Collectives& group) {
      arc::CheckpointWriter shard(rank == 0 ? nlohmann::json{{"step", step}} : nlohmann::json{{"shard", rank}});
      // A tensor without data cannot be written.
      shard.add("model/w" + std::to_string(rank), rank == failing_rank
                                                      ? torch::empty({4}, torch::TensorOptions().device(torch::kMeta))
                                                      : torch::full({4}, static_cast<double>(step + rank)));
      errors[static_cast<size_t>(rank)] =
          arc::testing::error_of([&] { arc::write_sharded_checkpoint(shard, folder, group); });
    });
    return errors;
  };
  const auto expect_set_of_step = [&](int64_t step) {
    const arc::CheckpointReader reader(folder);
    EXPECT_EQ(reader.meta().at("step"), step);
    EXPECT_TRUE(torch::equal(reader.tensor("model/w0"), torch::full({4}, static_cast<double>(step))));
    EXPECT_TRUE(torch::equal(reader.tensor("model/w1"), torch::full({4}, static_cast<double>(step + 1))));
  };
  EXPECT_EQ(save(1, -1), std::vector<std::string>(2));
  expect_set_of_step(1);
  for (const auto& error : save(2, 1)) {
    EXPECT_NE(error.find("was not saved, and the one there before (if any) is intact"), std::string::npos) << error;
    EXPECT_NE(error.find("rank 1: "), std::string::npos) << error;
  }
  expect_set_of_step(1);
  EXPECT_EQ(names_in(folder).size(), 3u);
  const auto shards = arc::read_sharded_index(folder).shards;
  std::filesystem::copy_file(shards[0], folder + "/7.rank0.shard");
  expect_set_of_step(1);
  EXPECT_EQ(save(3, -1), std::vector<std::string>(2));
  expect_set_of_step(3);
  EXPECT_EQ(names_in(folder).size(), 3u);
  std::filesystem::remove(folder + "/index.json");
  EXPECT_NE(arc::testing::error_of([&] { arc::CheckpointReader reader(folder); }).find("has no readable index.json"),
            std::string::npos);
  arc::remove_checkpoint(folder);
  EXPECT_FALSE(std::filesystem::exists(folder));
}

// Each rank's "<tag> <rank> <bytes>" lines, by rank.
std::map<int, int64_t> bytes_by_rank(const CommandRun& run, const std::string& tag) {
  std::map<int, int64_t> out;
  const std::regex line(tag + " (\\d+) (\\d+)");
  for (std::sregex_iterator it(run.output.begin(), run.output.end(), line), end; it != end; ++it)
    out[std::stoi((*it)[1])] = std::stoll((*it)[2]);
  return out;
}

// Layers made in configure_model, Lightning's hook for models too large to make whole: under
// FULL_SHARD each unit keeps only this rank's parameters from the moment it is made (rank 0 fc1's
// weight, 512 bytes; rank 1 the rest, 268), so no rank ever holds the whole model (780). Training
// gives DDP's weights and checkpoint; the units stay sharded after fit and through a validate after
// it, and every rank gathers them for the weights rank 0 writes. A precision that converts every parameter cannot take
// them.
TEST(FSDP, LayersMadeInConfigureModelAreNeverWholeOnARank) {
  const auto root = scratch_path("late_fsdp"), ddp_root = scratch_path("late_ddp");
  const auto out = scratch_path("late_fsdp_weights"), ddp_out = scratch_path("late_ddp_weights");
  for (const auto& folder : {root, ddp_root}) std::filesystem::remove_all(folder);
  const std::string common =
      " --build-late 1 --devices 2 --optimizer adam --steps 12 --accumulate 2 --clip 0.05 --checkpoints.every 12";
  const auto ddp = probe("--strategy ddp_spawn" + common + " --root " + ddp_root + " --out " + ddp_out);
  ASSERT_EQ(ddp.status, 0) << ddp.output;
  const auto full =
      probe("--strategy fsdp --sharding FULL_SHARD" + common + " --validate-after 1 --root " + root + " --out " + out);
  ASSERT_EQ(full.status, 0) << full.output;
  const std::map<int, int64_t> own = {{0, 512}, {1, 268}}, whole = {{0, 780}, {1, 780}};
  EXPECT_EQ(bytes_by_rank(full, "BUILT"), own) << full.output;
  EXPECT_EQ(bytes_by_rank(full, "RESIDENT"), own);
  EXPECT_EQ(bytes_by_rank(full, "VALIDATED"), own);  // a second stage takes the units as they are
  EXPECT_EQ(bytes_by_rank(ddp, "BUILT"), whole);
  EXPECT_FALSE(read_floats(out).empty());
  EXPECT_EQ(read_floats(out), read_floats(ddp_out));
  const arc::CheckpointReader a(checkpoint_in(root)), b(checkpoint_in(ddp_root));
  ASSERT_EQ(a.tensor_names(), b.tensor_names());
  for (const auto& name : a.tensor_names()) EXPECT_TRUE(torch::equal(a.tensor(name), b.tensor(name))) << name;
  const auto converted =
      probe("--strategy fsdp --sharding FULL_SHARD --build-late 1 --devices 2 --steps 2 --precision bf16-true");
  EXPECT_NE(converted.status, 0);
  EXPECT_NE(converted.output.find("belongs to an arc::ShardedUnit that FULL_SHARD sharded as configure_model made it"),
            std::string::npos)
      << converted.output;
  for (const auto& folder : {root, ddp_root}) std::filesystem::remove_all(folder);
  for (const auto& file : {out, ddp_out}) std::remove(file.c_str());
}

TEST(FSDP, OptionsItCannotTakeAreErrorsThatSayWhatToDo) {
  const auto lbfgs = probe("--strategy fsdp --steps 2 --optimizer lbfgs");
  EXPECT_NE(lbfgs.status, 0);
  EXPECT_NE(lbfgs.output.find("this optimizer is LBFGS, whose line search needs every gradient"), std::string::npos)
      << lbfgs.output;
  // Under FULL_SHARD every rank's backward gathers the same units in the same order.
  const auto skipped =
      probe("--strategy fsdp --sharding FULL_SHARD --steps 4 --devices 2 --skip.rank 1 --skip.batch 1");
  EXPECT_NE(skipped.status, 0);
  EXPECT_NE(skipped.output.find("training_step returned no loss, but under FULL_SHARD"), std::string::npos)
      << skipped.output;
  const auto unused = probe("--strategy fsdp --sharding FULL_SHARD --steps 2 --find-unused 1");
  EXPECT_NE(unused.status, 0);
  EXPECT_NE(unused.output.find("but find_unused_parameters is on"), std::string::npos) << unused.output;
  const auto not_fsdp = probe("--strategy ddp_spawn --steps 2 --state-dict-type sharded");
  EXPECT_NE(not_fsdp.status, 0);
  EXPECT_NE(not_fsdp.output.find("state_dict_type \"sharded\" is for strategy \"fsdp\""), std::string::npos)
      << not_fsdp.output;
  const auto ahead = probe("--strategy ddp_spawn --steps 2 --forward-prefetch 1");
  EXPECT_NE(ahead.status, 0);
  EXPECT_NE(ahead.output.find("forward_prefetch=true and backward_prefetch \"BACKWARD_PRE\" are for strategy \"fsdp\""),
            std::string::npos)
      << ahead.output;
  const auto whole_units = probe("--strategy fsdp --steps 2 --backward-prefetch NONE");
  EXPECT_NE(whole_units.status, 0);
  EXPECT_NE(whole_units.output.find("but this run's strategy is \"fsdp\" with \"SHARD_GRAD_OP\""), std::string::npos)
      << whole_units.output;
  const auto misspelled = probe("--strategy fsdp --steps 2 --sharding HYBRID_SHARDS");
  EXPECT_NE(misspelled.status, 0);
  EXPECT_NE(misspelled.output.find("did you mean 'HYBRID_SHARD'?"), std::string::npos) << misspelled.output;
  const auto ddp = probe("--strategy ddp_spawn --steps 2 --sharding SHARD_GRAD_OP");
  EXPECT_NE(ddp.status, 0);
  EXPECT_NE(ddp.output.find("sharding_strategy 'SHARD_GRAD_OP' is for strategy \"fsdp\""), std::string::npos)
      << ddp.output;
}

// Owners balance the bytes, whole tensors each; units end once every rank owns its part of one, so
// that shares are of nearly one length.
TEST(ShardLayout, OwnsWholeTensorsAndBalancesTheBytes) {
  std::vector<torch::Tensor> parameters;
  for (const int64_t n : {1000, 10, 600, 400, 30, 500}) parameters.push_back(torch::zeros({n}));
  const arc::ShardLayout one_unit(parameters, 2, 0, 1 << 20, 1 << 20);
  ASSERT_EQ(one_unit.units().size(), 1u);
  // Largest first, each to the rank with fewer bytes: 1000 → 0, 600 → 1, 500 → 1, 400 → 0, 30 → 1, 10 → 1.
  EXPECT_EQ((std::vector<int64_t>{one_unit.owner(0), one_unit.owner(2), one_unit.owner(5), one_unit.owner(3)}),
            (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(one_unit.owned_numel(0), 1400);
  EXPECT_EQ(one_unit.owned_numel(1), 1140);
  EXPECT_EQ(one_unit.units()[0].share, 1400);
  EXPECT_EQ(one_unit.units()[0].owned, (std::vector<int64_t>{1400, 1140}));
  for (size_t p = 0; p < parameters.size(); ++p) {
    auto whole = torch::zeros({2 * one_unit.units()[0].share});
    one_unit.place(p, whole).fill_(1);
    EXPECT_EQ(whole.sum().item<double>(), parameters[p].numel());
    EXPECT_EQ(whole.narrow(0, one_unit.owner(p) * 1400, 1400).sum().item<double>(), parameters[p].numel());
  }
  // Eight tensors of one size take turns, the last registered first: units of 400 bytes end at each
  // pair, without padding; with the skip vote's element in the first unit's shares.
  std::vector<torch::Tensor> layers(8, torch::Tensor());
  for (auto& layer : layers) layer = torch::zeros({100});
  const arc::ShardLayout pairs(layers, 2, 1, 400, 400, 1);
  ASSERT_EQ(pairs.units().size(), 4u);
  EXPECT_EQ(pairs.units()[0].parameters, (std::vector<size_t>{7, 6}));
  EXPECT_EQ(pairs.units()[0].share, 101);
  EXPECT_EQ(pairs.units()[3].share, 100);
  EXPECT_EQ((std::vector<int64_t>{pairs.owner(7), pairs.owner(6), pairs.owner(1), pairs.owner(0)}),
            (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_TRUE(pairs.owns(6));
  // Given owners (a layout of some of another's parameters) are kept, even where they do not alternate.
  const arc::ShardLayout given(layers, 2, 0, 400, 400, 0, std::vector<int64_t>(8, 0));
  EXPECT_EQ(given.owned_numel(0), 800);
  EXPECT_EQ(given.units().size(), 1u);
}

torch::Tensor values(uint64_t seed, int64_t numel) {
  auto generator = at::detail::createCPUGenerator(seed);
  return torch::randn({numel}, generator);
}

// Every path of the sharded reduction and of sharing parameters after a step, on thread ranks:
// units reduce-scattered, or (`keep`) all-reduced in the shared-memory buffers keep_small_units
// makes; parameters shared by all_gather_into (units up to 4 MiB), or by broadcasts from each owner
// (larger units; tensors of 1 MiB or more in place). Each owner's gradients are DDP's average of
// every rank's, and after an SGD step of the owners every rank holds DDP's weights, bit for bit.
void expect_sharded_steps_match_ddp(int64_t world, const arc::testing::Group& group, bool keep) {
  std::vector<int64_t> sizes(6, 700000);
  sizes.insert(sizes.end(), {17, 3000, 5000, 6000, 8000});
  arc::testing::on_ranks(world, group, [&](int64_t rank, arc::Collectives& collectives) {
    std::vector<torch::Tensor> parameters;
    for (size_t p = 0; p < sizes.size(); ++p) parameters.push_back(values(p, sizes[p]).requires_grad_());
    auto layout = std::make_shared<arc::ShardLayout>(parameters, world, rank, 64 << 10, 6 << 20, 1);
    bool large = false, small = false;
    for (const auto& unit : layout->units()) (unit.share * world * 4 > (4 << 20) ? large : small) = true;
    ASSERT_TRUE(large && small) << "the layout no longer has units of both sizes";
    if (keep) layout->keep_small_units(collectives);
    std::vector<std::string> names;
    for (size_t p = 0; p < sizes.size(); ++p) names.push_back("p" + std::to_string(p));
    arc::ShardedGradReducer reducer(layout, names, collectives, arc::ReducerOptions());
    for (uint64_t step = 0; step < 2; ++step) {
      // Rank r's gradient of parameter p is the coefficient of p in its loss.
      const auto coefficient = [&](int64_t r, size_t p) { return values(1000 * step + 100 * r + p, sizes[p]); };
      auto loss = torch::zeros({});
      for (size_t p = 0; p < sizes.size(); ++p) loss = loss + (parameters[p] * coefficient(rank, p)).sum();
      reducer.prepare_for_backward();
      loss.backward();
      for (size_t p = 0; p < sizes.size(); ++p) {
        // DDP's all-reduce: the sum in rank order, divided by the world size.
        auto average = coefficient(0, p);
        for (int64_t r = 1; r < world; ++r) average = average + coefficient(r, p);
        average.div_(static_cast<double>(world));
        const auto expected = parameters[p].detach().clone().add_(average, -0.1);
        if (layout->owns(p)) {
          ASSERT_TRUE(torch::equal(parameters[p].grad(), average)) << names[p] << " at step " << step;
          torch::NoGradGuard no_grad;
          parameters[p].add_(parameters[p].grad(), -0.1);
        } else {
          ASSERT_FALSE(parameters[p].grad().defined()) << names[p] << " keeps another rank's gradient";
        }
        parameters[p].mutable_grad() = expected;  // where the weights must be after sharing
      }
      EXPECT_FALSE(reducer.skip_voted());
      layout->share_parameters(collectives);
      for (size_t p = 0; p < sizes.size(); ++p) {
        ASSERT_TRUE(torch::equal(parameters[p].detach(), parameters[p].grad())) << names[p] << " at step " << step;
        parameters[p].mutable_grad() = torch::Tensor();
      }
    }
  });
}

TEST(ShardedGradReducer, EveryReductionAndSharingPathGivesDdpsBits) {
  expect_sharded_steps_match_ddp(3, {}, false);
  expect_sharded_steps_match_ddp(3, {}, true);
  arc::testing::Group gloo;
  gloo.shared_memory = false;
  expect_sharded_steps_match_ddp(2, gloo, false);
}

// A unit's gathers started ahead, on thread ranks over shared memory with a helper thread and over
// Gloo: three linear units, each layer's weight and bias owned by different ranks. As a unit's
// forward starts, the next unit's gather is in flight (forward_prefetch, once the first forward has
// recorded the order); as the last unit's backward starts (BACKWARD_PRE) or once it has its gradients
// (BACKWARD_POST), the middle unit's. Outputs and gradients are the whole model's, bit for bit, over
// two steps between which the owners change their values; a gather started ahead and then unused
// is released, not kept with values a step has made old.
TEST(UnitGather, GathersStartedAheadGiveTheWholeModelsValues) {
  using Unit = arc::ShardedUnit<torch::nn::Linear>;
  arc::testing::Group gloo;
  gloo.shared_memory = false;
  for (const auto& group : {arc::testing::Group(), gloo})
    for (const bool forward : {false, true})
      for (const std::string backward : {"BACKWARD_PRE", "BACKWARD_POST", "NONE"})
        arc::testing::on_ranks(2, group, [&](int64_t rank, arc::Collectives& collectives) {
          SCOPED_TRACE((group.shared_memory ? "shared memory, " : "gloo, ") + std::string(forward ? "forward, " : "") +
                       backward);
          torch::NoGradGuard no_grad;
          const auto order = std::make_shared<arc::UnitOrder>(forward, backward);
          std::vector<Unit> units;
          std::vector<std::shared_ptr<arc::UnitGather>> gathers;
          std::vector<torch::Tensor> whole;  // the same model's parameters, never sharded
          for (int64_t u = 0; u < 3; ++u) {
            torch::nn::Linear layer(8, 8);
            layer->weight.copy_(values(10 * u, 64).view({8, 8}));
            layer->bias.copy_(values(10 * u + 1, 8));
            whole.push_back(layer->weight.detach().clone().requires_grad_());
            whole.push_back(layer->bias.detach().clone().requires_grad_());
            units.emplace_back(layer);
            gathers.push_back(std::make_shared<arc::UnitGather>(
                std::vector<torch::Tensor>{layer->weight, layer->bias}, std::vector<std::string>{"weight", "bias"},
                std::vector<int64_t>{u % 2, (u + 1) % 2}, 2, rank, collectives));
            gathers.back()->release();
            gathers.back()->prefetch_with(order);
            units.back()->shard_with(gathers.back());
          }
          for (int64_t step = 0; step < 2; ++step) {
            const torch::AutoGradMode grad_mode(true);
            const auto x = values(100 + step, 32).view({4, 8});
            auto expected = x;
            for (int64_t u = 0; u < 3; ++u) expected = torch::addmm(whole[2 * u + 1], expected, whole[2 * u].t());
            const auto h0 = units[0](x);
            EXPECT_EQ(gathers[1]->prefetching(), forward && step > 0);
            const auto h1 = units[1](h0) * 1;  // its gradient's hook runs before the middle unit's backward
            EXPECT_EQ(gathers[2]->prefetching(), forward && step > 0);
            const auto out = units[2](h1);
            ASSERT_TRUE(torch::equal(out, expected));
            bool checked = false;
            h1.register_hook([&](const torch::Tensor&) {
              EXPECT_EQ(gathers[1]->prefetching(), backward != "NONE");
              checked = true;
            });
            out.pow(2).sum().backward();
            expected.pow(2).sum().backward();
            EXPECT_TRUE(checked);
            for (int64_t u = 0; u < 3; ++u) {
              EXPECT_FALSE(gathers[u]->gathered() || gathers[u]->prefetching()) << "unit " << u;
              const auto& layer = units[u]->module();
              ASSERT_TRUE(torch::equal(layer.weight.grad(), whole[2 * u].grad())) << "unit " << u;
              ASSERT_TRUE(torch::equal(layer.bias.grad(), whole[2 * u + 1].grad())) << "unit " << u;
            }
            // A step of the owners; the others' values are gathered anew.
            const torch::NoGradGuard step_without_grad;
            for (int64_t u = 0; u < 3; ++u) {
              auto& layer = units[u]->module();
              for (auto* parameter : {&layer.weight, &layer.bias}) {
                const bool owned = gathers[u]->layout().owns(parameter == &layer.weight ? 0 : 1);
                if (owned) parameter->add_(parameter->grad(), -0.1);
                parameter->mutable_grad() = torch::Tensor();
              }
            }
            for (auto& parameter : whole) {
              parameter.add_(parameter.grad(), -0.1);
              parameter.mutable_grad() = torch::Tensor();
            }
          }
          // A forward that stops after the first unit leaves the second's gather started ahead.
          units[0](values(7, 32).view({4, 8}));
          EXPECT_EQ(gathers[1]->prefetching(), forward);
          order->release_unused();
          EXPECT_FALSE(gathers[1]->gathered() || gathers[1]->prefetching());
        });
}

}  // namespace
