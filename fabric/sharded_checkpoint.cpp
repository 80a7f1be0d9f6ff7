// Sharded checkpoints: the parallel write, its index, and what reads and removes them.
#include <arc/fabric/sharded_checkpoint.h>

#include <arc/base/error.h>
#include <arc/base/output_file.h>
#include <arc/fabric/checkpoint.h>
#include <arc/fabric/detail/optimizer_state.h>
#include <arc/strategies/collectives.h>
#include <arc/strategies/strategy.h>

#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace arc {
namespace {

constexpr const char* kIndexFormat = "arclight-sharded-checkpoint";
constexpr int64_t kIndexVersion = 1;
constexpr const char* kShardSuffix = ".shard";

// "<generation>.rank<r>.shard": a save's files share its generation, so that the index names one set.
std::string shard_name(int64_t generation, int64_t rank) {
  return std::to_string(generation) + ".rank" + std::to_string(rank) + kShardSuffix;
}

// Removes the shard files in `folder` of `generation` (`of` true) or of every other (false).
void remove_shards(const std::string& folder, int64_t generation, bool of) {
  const std::string prefix = std::to_string(generation) + ".rank";
  const std::string suffix = kShardSuffix;
  std::error_code error;
  for (std::filesystem::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    const auto name = it->path().filename().string();
    const bool shard =
        name.size() > suffix.size() && name.compare(name.size() - suffix.size(), std::string::npos, suffix) == 0;
    std::error_code ignored;
    if (shard && (name.rfind(prefix, 0) == 0) == of) std::filesystem::remove(it->path(), ignored);
  }
}

// Every rank's failure ("" where none), as one error text naming the ranks; "" when none failed.
std::string failures_of(Collectives& group, const std::string& failure) {
  std::string out;
  const auto all = all_gather_text(group, failure);
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) out += (out.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " + all[r];
  return out;
}

template <typename Fn>
std::string failure_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}

void write_index(const std::string& folder, int64_t generation, int64_t world_size, const nlohmann::json& meta) {
  nlohmann::json shards = nlohmann::json::array();
  for (int64_t r = 0; r < world_size; ++r) shards.push_back(shard_name(generation, r));
  const std::string text = nlohmann::json{
      {"format", kIndexFormat},
      {"version", kIndexVersion},
      {"world_size", world_size},
      {"shards", shards},
      {"meta", meta}}.dump();
  OutputFile file(folder + "/" + kShardedIndexName, "sharded checkpoint index",
                  "ModelCheckpoint's dirpath, default_root_dir");
  file.write(text.data(), text.size());
  file.commit();
  // On disk before the set it replaces is removed.
  sync_folder(folder);
}

}  // namespace

void write_sharded_checkpoint(const CheckpointWriter& shard, const std::string& path, Collectives& group) {
  const int64_t rank = group.rank(), world_size = group.world_size();
  std::string failure;
  auto generation = torch::zeros({1}, torch::kLong);
  if (rank == 0) {
    generation.fill_(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    failure = failure_of([&] {
      // A link (ModelCheckpoint's save_last "link") is replaced, never written through.
      if (std::filesystem::is_symlink(path)) std::filesystem::remove(path);
      ARC_CHECK(!std::filesystem::exists(path) || std::filesystem::is_directory(path), "cannot write sharded ",
                "checkpoint '", path, "': a checkpoint file has that name; remove it, save elsewhere, or set the ",
                "strategy's state_dict_type to \"full\"");
      std::filesystem::create_directories(path);
      remove_stale_temporaries(path);
    });
  }
  group.broadcast(generation, 0);
  failure = broadcast_text(group, failure, 0);
  ARC_CHECK(failure.empty(), failure);
  const int64_t id = generation.item<int64_t>();
  // Temporaries are removed by rank 0 alone, above: a writer on another machine has a pid this one
  // cannot check.
  failure = failures_of(group, failure_of([&] {
                          shard.write(path + "/" + shard_name(id, rank), CheckpointWriter::Threads::kTwo, false);
                        }));
  if (failure.empty() && rank == 0) failure = failure_of([&] { write_index(path, id, world_size, shard.meta()); });
  failure = broadcast_text(group, failure, 0);
  // After a failure the new files go; after a success, the set they replace.
  if (rank == 0) remove_shards(path, id, !failure.empty());
  ARC_CHECK(failure.empty(), "sharded checkpoint '", path, "' was not saved, and the one there before (if any) ",
            "is intact: ", failure);
}

void add_owned_state(CheckpointWriter& shard, const torch::nn::Module& module, const std::string& prefix,
                     const Strategy& strategy) {
  for (const auto& [name, tensor] : named_state(module))
    if (strategy.owner_of(tensor).value_or(0) == strategy.global_rank()) shard.add(prefix + "/" + name, tensor);
}

void add_owned_optimizer(CheckpointWriter& shard, const std::string& name, const torch::optim::Optimizer& optimizer,
                         Strategy& strategy) {
  const bool sharded = !strategy.state_owners(optimizer).empty();
  if (!sharded) {
    if (strategy.global_rank() == 0) save_optimizer(shard, name, optimizer);
    return;
  }
  // Under HYBRID_SHARD the first node's ranks write the states; the other nodes hold replicas.
  CheckpointWriter replica(nlohmann::json::object());
  auto& writer = strategy.owner_rank() == strategy.global_rank() ? shard : replica;
  save_optimizer(writer, name, optimizer);
  std::vector<nlohmann::json> layouts;
  for (const auto& text : all_gather_text(*strategy.collectives(), writer.take_json(name).dump()))
    layouts.push_back(nlohmann::json::parse(text));
  if (strategy.global_rank() == 0) shard.add_json(name, merge_optimizer_layouts(layouts));
}

ShardedCheckpointIndex read_sharded_index(const std::string& folder) {
  const std::string path = folder + "/" + kShardedIndexName;
  std::ifstream in(path);
  ARC_CHECK(in.good(), "sharded checkpoint '", folder, "' has no readable ", kShardedIndexName, ": its first save ",
            "did not complete, or the folder is not a checkpoint; use another checkpoint");
  std::stringstream text;
  text << in.rdbuf();
  const auto index = nlohmann::json::parse(text.str(), nullptr, false);
  const auto corrupt = [&](const std::string& what) {
    return "sharded checkpoint '" + folder + "' is corrupt (" + what + " in " + kShardedIndexName +
           "); use an earlier one";
  };
  ARC_CHECK(index.is_object() && index.value("format", "") == kIndexFormat, corrupt("no Arclight index"));
  ARC_CHECK(index.value("version", int64_t{0}) == kIndexVersion, "sharded checkpoint '", folder, "' has index ",
            "version ", index.value("version", nlohmann::json()).dump(), ", but this Arclight reads version ",
            kIndexVersion, "; load it with the Arclight that wrote it");
  const auto shards = index.value("shards", nlohmann::json());
  ARC_CHECK(shards.is_array() && !shards.empty() && index.value("world_size", nlohmann::json()) == shards.size() &&
                index.contains("meta"),
            corrupt("no list of shards"));
  ShardedCheckpointIndex out{index.at("meta"), {}};
  for (const auto& name : shards) {
    ARC_CHECK(name.is_string() && name.get<std::string>().find('/') == std::string::npos, corrupt("a bad shard name"));
    out.shards.push_back(folder + "/" + name.get<std::string>());
    ARC_CHECK(std::filesystem::is_regular_file(out.shards.back()), "sharded checkpoint '", folder, "' is missing ",
              "its shard '", name.get<std::string>(), "'; use an earlier one");
  }
  return out;
}

void remove_checkpoint(const std::string& path) {
  std::error_code ignored;
  // A link goes, not what it links to.
  if (std::filesystem::is_symlink(path) || !std::filesystem::is_directory(path)) {
    std::filesystem::remove(path, ignored);
    return;
  }
  std::filesystem::remove(path + "/" + kShardedIndexName, ignored);
  std::filesystem::remove_all(path, ignored);
}

void consolidate_checkpoint(const std::string& from, const std::string& to) {
  const CheckpointReader reader(from);
  CheckpointWriter writer(reader.meta());
  writer.add_entries(reader);
  writer.write(to);
}

}  // namespace arc
