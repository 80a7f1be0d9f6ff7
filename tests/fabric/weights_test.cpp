// Weights in and out (fabric/weights.h): safetensors to the specification, checked by a reader
// written from the spec in Python (safetensors_spec.py), Hugging Face's shards, hostile files, and
// load_weights' name mapping and report.
#include "support/command.h"
#include "support/errors.h"
#include "support/python.h"
#include "support/scratch.h"

#include <arc/base/error.h>
#include <arc/fabric/checkpoint.h>
#include <arc/fabric/weights.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace arc {
namespace {

using testing::error_of;

const std::string kSpec = std::string(ARC_SOURCE_DIR) + "/tests/fabric/safetensors_spec.py";

// safetensors_spec.py's expected(): a [2, 3] tensor of each dtype, and an empty one.
StateDict expected_tensors() {
  const std::vector<std::pair<std::string, torch::Dtype>> dtypes = {
      {"f64", torch::kDouble}, {"f32", torch::kFloat}, {"f16", torch::kHalf},  {"bf16", torch::kBFloat16},
      {"i64", torch::kLong},   {"i32", torch::kInt},   {"i16", torch::kShort}, {"i8", torch::kChar},
      {"u8", torch::kByte},    {"bool", torch::kBool}};
  StateDict out;
  for (const auto& [name, dtype] : dtypes) {
    const auto values = torch::arange(6, torch::kDouble).reshape({2, 3}) * 0.75 - 1.5;
    out.emplace_back("t_" + name, dtype == torch::kBool ? values != 0 : values.to(dtype));
  }
  out.emplace_back("empty", torch::zeros({0, 4}));
  return out;
}

std::string folder(const std::string& name) { return testing::fresh_folder("weights_" + name); }

void expect_same(const StateDict& got, const StateDict& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second.scalar_type(), want[i].second.scalar_type()) << want[i].first;
    EXPECT_TRUE(torch::equal(got[i].second, want[i].second)) << want[i].first;
  }
}

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 8));
    bn = register_module("bn", torch::nn::BatchNorm1d(8));
    fc2 = register_module("fc2", torch::nn::Linear(8, 3));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

void expect_same_state(const torch::nn::Module& a, const torch::nn::Module& b) {
  const auto left = state_dict(a), right = state_dict(b);
  ASSERT_EQ(left.size(), right.size());
  for (size_t i = 0; i < left.size(); ++i) EXPECT_TRUE(torch::equal(left[i].second, right[i].second)) << left[i].first;
}

// Every dtype round-trips, in order, with the metadata, and the bytes are the spec's: Python's
// reader written from the spec alone checks Arclight's file, and Arclight reads Python's.
TEST(Weights, SafetensorsFollowTheSpecInBothDirections) {
  const auto dir = folder("spec");
  const auto path = dir + "/all.safetensors";
  EXPECT_EQ(save_weights(expected_tensors(), path, SaveWeightsOptions().metadata({{"epoch", "3"}})),
            std::vector<std::string>{path});
  expect_same(read_weights(path), expected_tensors());
  const auto reader = open_weights(path);
  EXPECT_EQ(reader->metadata(), (std::map<std::string, std::string>{{"epoch", "3"}, {"format", "pt"}}));
  // The header's length, little-endian, then the header padded to 8 bytes.
  std::ifstream in(path, std::ios::binary);
  uint64_t length = 0;
  in.read(reinterpret_cast<char*>(&length), 8);
  EXPECT_EQ((8 + length) % 8, 0u);

  const auto python = testing::python_with_torch();
  if (python.empty()) GTEST_SKIP() << testing::kNoPythonWithTorch;
  const auto checked = testing::run_command(python + " " + kSpec + " check " + path);
  EXPECT_EQ(checked.status, 0) << checked.output;
  EXPECT_EQ(checked.output, "OK 11\n");
  const auto theirs = dir + "/theirs.safetensors";
  const auto written = testing::run_command(python + " " + kSpec + " write " + theirs);
  ASSERT_EQ(written.status, 0) << written.output;
  expect_same(read_weights(theirs), expected_tensors());
  EXPECT_EQ(open_weights(theirs)->metadata().at("written_by"), "the spec");
  std::filesystem::remove_all(dir);
}

// .pt as torch.save(state_dict) writes it: torch.load(weights_only=True), PyTorch's default since
// 2.6, reads every dtype back in order.
TEST(Weights, PtFilesAreWhatTorchLoadReadsWithWeightsOnly) {
  const auto python = testing::python_with_torch();
  if (python.empty()) GTEST_SKIP() << testing::kNoPythonWithTorch;
  const auto dir = folder("pt");
  const auto path = dir + "/all.pt";
  EXPECT_EQ(save_weights(expected_tensors(), path), std::vector<std::string>{path});
  const std::string check = "import sys, torch; sys.path.insert(0, '" + std::string(ARC_SOURCE_DIR) +
                            "/tests/fabric'); from safetensors_spec import expected; "
                            "got = torch.load('" +
                            path +
                            "', weights_only=True); want = expected(); "
                            "assert list(got) == list(want), list(got); "
                            "assert all(got[k].dtype == v.dtype and torch.equal(got[k], v) for k, v in want.items()); "
                            "print('OK', len(got))";
  const auto run = testing::run_command(python + " -c \"" + check + "\" 2>&1");
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(run.output, "OK 11\n");
  for (const char* file : {"/twice.pt", "/twice.safetensors"})
    EXPECT_NE(error_of([&] {
                save_weights(StateDict{{"a", torch::ones(1)}, {"a", torch::ones(1)}}, dir + file);
              }).find("tensor name 'a' comes twice"),
              std::string::npos)
        << file;
  EXPECT_NE(error_of([&] {
              save_weights(expected_tensors(), dir + "/w.pt", SaveWeightsOptions().max_shard_mb(1));
            }).find("max_shard_mb shards .safetensors files only"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

// A module's parameters and buffers go out and come back, to the bit.
TEST(Weights, AModuleRoundTripsThroughSafetensors) {
  const auto dir = folder("module");
  torch::manual_seed(1);
  Net trained;
  trained.bn->running_mean.uniform_();
  const auto path = dir + "/net.safetensors";
  save_weights(trained, path);
  torch::manual_seed(2);
  Net fresh;
  const auto report = load_weights(fresh, path);
  expect_same_state(fresh, trained);
  EXPECT_EQ(report.loaded.size(), state_dict(trained).size());
  EXPECT_TRUE(report.missing.empty() && report.unexpected.empty() && report.skipped.empty());
  std::filesystem::remove_all(dir);
}

// Above max_shard_mb the weights are Hugging Face's shards and index, which read back as one file.
TEST(Weights, LargeWeightsAreWrittenAsShardsWithAnIndex) {
  const auto dir = folder("shards");
  StateDict state;
  for (int i = 0; i < 5; ++i) state.emplace_back("layer" + std::to_string(i), torch::full({256, 256}, float(i)));
  const auto files = save_weights(state, dir + "/model.safetensors", SaveWeightsOptions().max_shard_mb(0.5));
  ASSERT_EQ(files.size(), 4u);  // 256 KiB each: two per shard, then the fifth alone
  EXPECT_EQ(files[0], dir + "/model-00001-of-00003.safetensors");
  EXPECT_EQ(files[3], dir + "/model.safetensors.index.json");
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors"));
  std::ifstream in(files[3]);
  const auto index = nlohmann::json::parse(in);
  EXPECT_EQ(index["metadata"]["total_size"], 5 * 256 * 256 * 4);
  EXPECT_EQ(index["weight_map"]["layer4"], "model-00003-of-00003.safetensors");
  expect_same(read_weights(files[3]), state);
  std::filesystem::remove_all(dir);
}

// A file as Hugging Face's pretrained weights name it, loaded into a module of other names:
// prefixes, renames and skips map them, and the report says what happened to each.
TEST(Weights, LoadMapsNamesAndReportsWhatItDid) {
  const auto dir = folder("mapping");
  torch::manual_seed(3);
  Net source;
  StateDict pretrained;
  for (const auto& [name, tensor] : state_dict(source)) {
    std::string renamed = "model." + name;
    if (name.rfind("fc1.", 0) == 0) renamed = "model.encoder.layer.0." + name.substr(4);
    pretrained.emplace_back(renamed, tensor);
  }
  pretrained.emplace_back("model.classifier.weight", torch::zeros({10, 8}));
  const auto path = dir + "/pretrained.safetensors";
  save_weights(pretrained, path);

  torch::manual_seed(4);
  Net target;
  const auto options = LoadWeightsOptions()
                           .strip_prefix("model.")
                           .rename({{"encoder\\.layer\\.0\\.", "fc1."}})
                           .skip({"model\\.classifier\\..*"});
  const auto report = load_weights(target, path, options);
  expect_same_state(target, source);
  EXPECT_EQ(report.skipped, std::vector<std::string>{"model.classifier.weight"});
  EXPECT_EQ(report.loaded.size(), state_dict(source).size());
  EXPECT_NE(report.summary().find("skipped 1: model.classifier.weight"), std::string::npos) << report.summary();

  // Without the rename, strict refuses and changes nothing; not strict loads what matches.
  torch::manual_seed(5);
  Net partial;
  const auto before = state_dict(partial)[0].second.clone();
  const auto refused = error_of([&] { load_weights(partial, path, LoadWeightsOptions().strip_prefix("model.")); });
  EXPECT_NE(refused.find("nothing was changed"), std::string::npos) << refused;
  EXPECT_NE(refused.find("missing 2: fc1.weight, fc1.bias"), std::string::npos) << refused;
  EXPECT_NE(refused.find("unexpected 3: encoder.layer.0.weight, encoder.layer.0.bias, classifier.weight"),
            std::string::npos)
      << refused;
  EXPECT_TRUE(torch::equal(state_dict(partial)[0].second, before));
  const auto loose = load_weights(partial, path, LoadWeightsOptions().strip_prefix("model.").strict(false));
  EXPECT_EQ(loose.missing, (std::vector<std::string>{"fc1.weight", "fc1.bias"}));
  EXPECT_TRUE(torch::equal(partial.fc2->weight, source.fc2->weight));
  EXPECT_TRUE(torch::equal(partial.fc1->weight, before));
  std::filesystem::remove_all(dir);
}

// Shapes that differ are refused, strict or not, naming both; dtype converts the module first.
TEST(Weights, ShapeMismatchesAreRefusedAndDtypeConvertsTheModule) {
  const auto dir = folder("shapes");
  const auto path = dir + "/w.safetensors";
  save_weights(StateDict{{"fc1.weight", torch::zeros({5, 4})}}, path);
  Net net;
  const auto message = error_of([&] { load_weights(net, path, LoadWeightsOptions().strict(false)); });
  EXPECT_NE(message.find("shape mismatch: fc1.weight is [8, 4] in the module, [5, 4] in the file"), std::string::npos)
      << message;
  EXPECT_NE(message.find("LoadWeightsOptions::skip"), std::string::npos) << message;
  // A refused load converts nothing either.
  EXPECT_NE(error_of([&] { load_weights(net, path, LoadWeightsOptions().dtype(torch::kBFloat16)); }), "");
  EXPECT_EQ(net.fc1->weight.scalar_type(), torch::kFloat);

  Net source;
  save_weights(source, path);
  Net half;
  load_weights(half, path, LoadWeightsOptions().dtype(torch::kBFloat16));
  EXPECT_EQ(half.fc1->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(half.bn->num_batches_tracked.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(half.fc1->weight, source.fc1->weight.to(torch::kBFloat16)));
  std::filesystem::remove_all(dir);
}

// A file's bytes: the 8-byte length, then `header` padded, then `data`.
void write_raw(const std::string& path, const std::string& header, const std::string& data, int64_t length = -1) {
  std::string padded = header;
  padded.append((8 - padded.size() % 8) % 8, ' ');
  const uint64_t declared = length < 0 ? padded.size() : static_cast<uint64_t>(length);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&declared), 8);
  out.write(padded.data(), static_cast<std::streamsize>(padded.size()));
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Every way a file can lie is an error that names the file and the entry, before any tensor is
// allocated: nothing larger than the file is ever made.
TEST(Weights, HostileSafetensorsAreErrorsNamingTheFileAndEntry) {
  const auto dir = folder("hostile");
  const auto path = dir + "/bad.safetensors";
  const std::string eight(8, 'x');
  const auto refusal = [&](const std::string& header, const std::string& data, int64_t length = -1) {
    write_raw(path, header, data, length);
    return error_of([&] { open_weights(path); });
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {refusal(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", eight, 1 << 20),
       "declares a 1048576-byte header, but holds"},
      {refusal("not json", ""), "has a header that is not JSON"},
      {refusal(R"({"a": {"dtype": "F8_E4M3", "shape": [8], "data_offsets": [0, 8]}})", eight),
       "entry 'a' has dtype \"F8_E4M3\", which Arclight does not read"},
      {refusal(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
               eight),
       "names 'a' twice"},
      {refusal(R"({"a": {"dtype": "F32", "shape": [1000000000], "data_offsets": [0, 4000000000]}})", eight),
       "entry 'a' has data_offsets [0,4000000000] past the end of its 8 bytes of data"},
      {refusal(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", eight),
       "entry 'a' has shape [3] of \"F32\" but data_offsets [0,8] of 8 bytes"},
      {refusal(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                    "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
               eight),
       "entry 'b' starts at byte 4 of the data, but the entries before it end at 8; they overlap"},
      {refusal(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", eight),
       "entry 'a' starts at byte 4 of the data, but the entries before it end at 0; the file has a hole"},
      {refusal(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", eight),
       "has 4 bytes after its last tensor"},
      {refusal(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", eight),
       "has a shape that is not a list of sizes >= 0"},
      {refusal(R"({"a": {"dtype": "F32", "shape": [18446744073709551615, 2], "data_offsets": [0, 8]}})", eight),
       "but data_offsets [0,8] of 8 bytes"},
  };
  for (const auto& [message, expected] : cases) {
    EXPECT_NE(message.find(expected), std::string::npos) << message;
    EXPECT_NE(message.find(path), std::string::npos) << message;
  }
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_NE(error_of([&] { open_weights(path); }).find("is 3 bytes long, shorter than its 8-byte header length"),
            std::string::npos);
  EXPECT_NE(error_of([&] { open_weights(dir + "/w.pt"); }).find("cannot tell the format of weights file"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

// An Arclight checkpoint's module weights read by their names in the module; a PyTorch zip file
// named .ckpt (Lightning's) is told apart.
TEST(Weights, ArclightCheckpointsAreReadAsTheirModulesWeights) {
  const auto dir = folder("checkpoint");
  torch::manual_seed(6);
  Net net;
  CheckpointWriter writer({{"epoch", 2}, {"global_step", 40}});
  writer.add_module(net);
  writer.add("optimizer_0/momentum", torch::ones({3}));
  writer.write(dir + "/last.ckpt");
  const auto reader = open_weights(dir + "/last.ckpt");
  EXPECT_EQ(reader->metadata(), (WeightsMetadata{{"epoch", "2"}, {"global_step", "40"}}));
  StateDict sorted = state_dict(net);
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  expect_same(read_weights(dir + "/last.ckpt"), sorted);
  std::ofstream(dir + "/lightning.ckpt", std::ios::binary) << "PK\x03\x04 and the rest of a zip";
  EXPECT_NE(error_of([&] { open_weights(dir + "/lightning.ckpt"); }).find("is a PyTorch zip file"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// An index that names a tensor its shard does not hold, or misses one, does not load.
TEST(Weights, AnIndexThatDisagreesWithItsShardsIsAnError) {
  const auto dir = folder("bad_index");
  save_weights(StateDict{{"a", torch::ones({2})}, {"b", torch::ones({2})}}, dir + "/part.safetensors");
  const auto index = dir + "/model.safetensors.index.json";
  std::ofstream(index) << R"({"weight_map": {"a": "part.safetensors", "c": "part.safetensors"}})";
  const auto message = error_of([&] { open_weights(index); });
  EXPECT_NE(message.find("does not list tensor 'b' of shard"), std::string::npos) << message;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace arc
