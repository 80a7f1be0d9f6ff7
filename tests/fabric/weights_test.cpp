// Weights in and out (fabric/weights.h): safetensors to the specification, checked by a reader
// written from the spec in Python (safetensors_spec.py), Hugging Face's shards, torch.save's files
// and Lightning's checkpoints both ways, hostile files, and load_weights' name mapping and report.
#include "support/command.h"
#include "support/errors.h"
#include "support/python.h"
#include "support/scratch.h"

#include <arc/base/error.h>
#include <arc/fabric/checkpoint.h>
#include <arc/fabric/weights.h>

#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
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
  EXPECT_NE(error_of([&] { open_weights(dir + "/w.npz"); }).find("cannot tell the format of weights file"),
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
  EXPECT_NE(error_of([&] { open_weights(dir + "/lightning.ckpt"); }).find("has no zip directory"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// .pt and Lightning's .ckpt written here are read back here, every dtype to the bit; the .ckpt
// is what torch.load finds in a Lightning checkpoint.
TEST(Weights, PtFilesAndLightningCheckpointsRoundTrip) {
  const auto dir = folder("pt_round_trip");
  save_weights(expected_tensors(), dir + "/all.pt");
  expect_same(read_weights(dir + "/all.pt"), expected_tensors());
  const nlohmann::json hparams = {{"lr", 0.1}, {"hidden", {8, 16}}, {"name", nullptr}, {"bias", true}, {"act", "relu"}};
  save_weights(expected_tensors(), dir + "/last.ckpt",
               SaveWeightsOptions().epoch(3).global_step(120).hyper_parameters(hparams));
  expect_same(read_weights(dir + "/last.ckpt"), expected_tensors());
  EXPECT_EQ(open_weights(dir + "/last.ckpt")->metadata(),
            (WeightsMetadata{{"epoch", "3"}, {"global_step", "120"}, {"pytorch-lightning_version", "2.2.5"}}));
  EXPECT_NE(error_of([&] {
              save_weights(expected_tensors(), dir + "/bad.ckpt", SaveWeightsOptions().hyper_parameters({1, 2}));
            }).find("hyper_parameters must be a JSON object"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir + "/bad.ckpt"));
  const auto python = testing::python_with_torch();
  if (python.empty()) GTEST_SKIP() << testing::kNoPythonWithTorch;
  const std::string check = "import json, sys, torch; sys.path.insert(0, '" + std::string(ARC_SOURCE_DIR) +
                            "/tests/fabric'); from safetensors_spec import expected; "
                            "c = torch.load('" +
                            dir +
                            "/last.ckpt'); want = expected(); "
                            "assert all(torch.equal(c['state_dict'][k], v) for k, v in want.items()); "
                            "print(json.dumps({k: v for k, v in c.items() if k != 'state_dict'}, sort_keys=True))";
  const auto run = testing::run_command(python + " -c \"" + check + "\" 2>&1");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(
      nlohmann::json::parse(run.output),
      (nlohmann::json{
          {"epoch", 3}, {"global_step", 120}, {"hyper_parameters", hparams}, {"pytorch-lightning_version", "2.2.5"}}));
  std::filesystem::remove_all(dir);
}

// What Python's torch.save writes is read without Python: views that share a storage, every
// dtype, a Lightning checkpoint's state_dict; what is not a state_dict, a pickle that would run
// code, TorchScript and the legacy format are errors that say what the file is.
TEST(Weights, TorchSaveFilesFromPythonAreReadWithoutPython) {
  const auto python = testing::python_with_torch();
  if (python.empty()) GTEST_SKIP() << testing::kNoPythonWithTorch;
  const auto dir = folder("from_python");
  const auto made =
      testing::run_command(python + " " + ARC_SOURCE_DIR + "/tests/fabric/torch_files.py " + dir + " 2>&1");
  ASSERT_EQ(made.status, 0) << made.output;
  expect_same(read_weights(dir + "/views.pt"), read_weights(dir + "/views.safetensors"));
  const auto lightning = open_weights(dir + "/lightning.ckpt");
  EXPECT_EQ(lightning->metadata(),
            (WeightsMetadata{{"epoch", "3"}, {"global_step", "120"}, {"pytorch-lightning_version", "2.2.5"}}));
  torch::manual_seed(3);
  struct Sequential : torch::nn::Module {
    Sequential() {
      register_module("0", torch::nn::Linear(4, 8));
      register_module("1", torch::nn::BatchNorm1d(8));
      register_module("2", torch::nn::Linear(8, 3));
    }
  } net;
  const auto report = load_weights(net, dir + "/lightning.ckpt", LoadWeightsOptions().strip_prefix("model."));
  EXPECT_EQ(report.loaded.size(), 9u) << report.summary();
  const auto sorted = [](StateDict state) {
    std::sort(state.begin(), state.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return state;
  };
  expect_same(sorted(state_dict(net)), sorted(read_weights(dir + "/net.pt")));
  const auto message = [&](const std::string& file) { return error_of([&] { open_weights(dir + "/" + file); }); };
  EXPECT_NE(message("nested.pt")
                .find("is a dict, so it is not a state_dict (name -> tensor), nor a checkpoint with "
                      "one under 'state_dict' (its keys: 'model', 'opt')"),
            std::string::npos)
      << message("nested.pt");
  EXPECT_NE(message("evil.pt").find("its pickle needs the Python object 'posix.system'"), std::string::npos)
      << message("evil.pt");
  EXPECT_FALSE(std::filesystem::exists(dir + "/pwned"));
  EXPECT_NE(message("script.pt").find("this is a TorchScript archive"), std::string::npos) << message("script.pt");
  EXPECT_NE(message("legacy.pt").find("in the legacy format"), std::string::npos) << message("legacy.pt");
  std::filesystem::remove_all(dir);
}

// Pickle pieces for hand-made torch.save files.
std::string u32(uint32_t value) { return std::string(reinterpret_cast<const char*>(&value), 4); }
std::string text(const std::string& value) { return "X" + u32(static_cast<uint32_t>(value.size())) + value; }
std::string integer(int32_t value) { return "J" + u32(static_cast<uint32_t>(value)); }
std::string global(const std::string& module, const std::string& name) { return "c" + module + "\n" + name + "\n"; }
std::string ints(const std::vector<int32_t>& values) {
  std::string out = "(";
  for (const auto value : values) out += integer(value);
  return out + "t";
}
// _rebuild_tensor_v2 of float storage `key` (`numel` elements) at `offset` with `sizes` and `strides`.
std::string tensor(const std::string& key, int32_t numel, int32_t offset, const std::vector<int32_t>& sizes,
                   const std::vector<int32_t>& strides) {
  return global("torch._utils", "_rebuild_tensor_v2") + "((" + text("storage") + global("torch", "FloatStorage") +
         text(key) + text("cpu") + integer(numel) + "tQ" + integer(offset) + ints(sizes) + ints(strides) + "\x89" +
         global("collections", "OrderedDict") + ")RtR";
}
// A dict of `items` (pickled keys and values), as protocol 2 writes it.
std::string dict(const std::string& items) { return "\x80\x02}(" + items + "u."; }

// A zip archive of `records` as torch.save lays them out, by LibTorch's writer.
std::string archive(const std::string& pickle, const std::vector<std::pair<std::string, std::string>>& data) {
  std::string out;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t size) {
    out.append(static_cast<const char*>(bytes), size);
    return size;
  });
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  for (const auto& [name, bytes] : data) writer.writeRecord(name, bytes.data(), bytes.size());
  writer.writeEndOfFile();
  return out;
}

// Files that lie are errors naming the file and what is wrong, raised before anything the file
// declares is allocated: sizes past the end, storages larger than their records, views outside
// their storage, a billion entries, pickles that would build objects or run code.
TEST(Weights, HostilePtFilesAreErrorsBeforeAnythingIsAllocated) {
  const auto dir = folder("hostile_pt");
  std::string floats(24, '\0');
  for (int i = 0; i < 6; ++i) {
    const float value = static_cast<float>(i) * 0.5f;
    std::memcpy(&floats[4 * i], &value, 4);
  }
  const auto good = archive(dict(text("w") + tensor("0", 6, 0, {2, 3}, {3, 1})), {{"data/0", floats}});
  std::ofstream(dir + "/good.pt", std::ios::binary) << good;
  EXPECT_TRUE(
      torch::equal(read_weights(dir + "/good.pt").at(0).second, torch::arange(6, torch::kFloat).reshape({2, 3}) * 0.5));
  const auto error = [&](const std::string& bytes) {
    std::ofstream(dir + "/bad.pt", std::ios::binary | std::ios::trunc) << bytes;
    return error_of([&] { read_weights(dir + "/bad.pt"); });
  };
  const auto with = [&](const std::string& pickle) { return error(archive(pickle, {{"data/0", floats}})); };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {with(dict(text("w") + tensor("0", 1'000'000'000, 0, {2, 3}, {3, 1}))),
       "declares storage '0' of 1000000000 Float elements, but its record holds 24 bytes"},
      {with(dict(text("w") + tensor("0", 6, 2, {2, 3}, {3, 1}))), "puts a tensor of size [2, 3] at offset 2"},
      {with(dict(text("w") + tensor("0", 6, 0, {2, 3}, {-3, 1}))), "negative size or stride"},
      {with(dict(text("w") + tensor("7", 6, 0, {2, 3}, {3, 1}))), "holds no record 'archive/data/7'"},
      {with(dict(text("w") + global("posix", "system") + "(" + text("touch pwned") + "tR")),
       "needs the Python object 'posix.system'"},
      {with(dict(text("w") + global("collections", "OrderedDict") + ")\x81")), "builds a Python object from its class"},
      {with(dict(text("w") + "h\x05")), "reads memo entry 5, which it never wrote"},
      {with(dict(text("w") + tensor("0", 6, 0, {2, 3}, {3, 1})).substr(0, 40)), "the file is truncated or corrupt"},
      {with(dict(text("w") + tensor("0", 6, 0, {6}, {1}) + text("w") + tensor("0", 6, 0, {6}, {1}))),
       "names tensor 'w' twice"},
      {with(dict(text("w") + integer(7))), "holds a dict whose 'w' is an int, so it is not a state_dict"},
      {error(archive(dict(text("w") + tensor("0", 6, 0, {2, 3}, {3, 1})), {{"data/0", floats}, {"byteorder", "big"}})),
       "was written on a big-endian machine"},
      {error(good.substr(0, good.size() - 10)), "has no zip directory at its end; it is truncated"},
      // A stride of 0 repeats one element: a view with more elements than its storage.
      {with(dict(text("w") + tensor("0", 6, 0, {1 << 30}, {0}))), "puts a tensor of size [1073741824] at offset 0"},
      // Two million empty lists: more than a pickle of its size builds for a state_dict.
      {with("\x80\x02" + std::string(2'000'000, ']') + "."), "MiB of values, more than a state_dict of its size"},
  };
  for (const auto& [message, want] : cases) EXPECT_NE(message.find(want), std::string::npos) << message;
  for (const auto& [message, want] : cases) EXPECT_NE(message.find(dir + "/bad.pt"), std::string::npos) << message;
  // The directory's own numbers: a record declared larger than the file, and more entries than
  // the directory has room for.
  auto lying = good;
  const auto entry = lying.rfind("PK\x01\x02", lying.rfind("archive/data/0"));
  ASSERT_NE(entry, std::string::npos);
  for (const size_t field : {20, 24}) std::memcpy(&lying[entry + field], "\xf0\xff\xff\x7f", 4);
  EXPECT_NE(error(lying).find("declares 2147483632 bytes at byte"), std::string::npos) << error(lying);
  auto crowded = good;
  const auto end = crowded.rfind("PK\x05\x06");
  ASSERT_NE(end, std::string::npos);
  std::memcpy(&crowded[end + 8], "\xff\xfe\xff\xfe", 4);  // entries: on this disk and in all
  EXPECT_NE(error(crowded).find("declares a zip directory of 65279 entries"), std::string::npos) << error(crowded);
  // A pipe is refused at once, not waited on.
  ASSERT_EQ(::mkfifo((dir + "/pipe.pt").c_str(), 0600), 0);
  EXPECT_NE(error_of([&] { open_weights(dir + "/pipe.pt"); }).find("is not a regular file"), std::string::npos);
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
