// Profiler's shared part and the names TrainerOptions::profiler takes.
#include <arc/profilers/profiler.h>

#include <arc/base/config.h>
#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/profilers/advanced_profiler.h>
#include <arc/profilers/simple_profiler.h>

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <typeindex>
#include <unordered_map>

namespace arc {

bool ProfilerSpec::name_only() const { return dirpath.empty() && filename.empty() && !row_limit && chrome_trace; }

void Profiler::set_output(std::string dirpath, std::string filename) {
  own_dirpath_ = std::move(dirpath);
  filename_ = std::move(filename);
}

void Profiler::setup(const std::string& stage, const std::string& dirpath, int64_t global_rank) {
  stage_ = stage;
  dirpath_ = own_dirpath_.empty() ? dirpath : own_dirpath_;
  global_rank_ = global_rank;
}

std::string Profiler::output_path(const std::string& kind, const std::string& extension) const {
  const std::string name =
      filename_.empty() ? (kind.empty() ? "profile" : kind) : (kind.empty() ? filename_ : filename_ + "-" + kind);
  std::error_code error;
  std::filesystem::create_directories(dirpath_, error);
  ARC_CHECK(!error, "cannot create the profiler's folder '", dirpath_, "': ", error.message(),
            "; make the Trainer's default_root_dir (or its logger's save_dir) writable");
  std::string path = dirpath_ + "/" + stage_ + "-" + name;
  if (global_rank_ > 0) path += "-" + std::to_string(global_rank_);
  return path + "." + extension;
}

void Profiler::describe() {
  const std::string report = summary();
  const std::string path = output_path("", "txt");
  std::ofstream out(path);
  out << report;
  ARC_CHECK(out.flush(), "cannot write the profile '", path, "'; free space or make the folder writable");
  if (global_rank_ == 0) console().info("{} profile ({})\n{}", stage_, path, report);
  reset();
}

void ProfileScope::finish() noexcept {
  try {
    profiler_->stop(action_);
  } catch (const std::exception& error) {
    console().error("the profiler could not stop '{}': {}", action_, error.what());
  }
}

std::string class_name(const std::type_info& type) {
  thread_local std::unordered_map<std::type_index, std::string> known;
  const auto found = known.find(type);
  if (found != known.end()) return found->second;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status),
                                                   std::free);
  std::string name = status == 0 ? demangled.get() : type.name();
  if (name.find('<') == std::string::npos && name.rfind("::") != std::string::npos)
    name = name.substr(name.rfind("::") + 2);
  return known.emplace(type, name).first->second;
}

const std::vector<std::string>& profiler_names() {
  static const std::vector<std::string> names = {"simple", "advanced", "pytorch"};
  return names;
}

const std::vector<std::string>& profiler_class_names() {
  static const std::vector<std::string> names = {"SimpleProfiler", "AdvancedProfiler", "PyTorchProfiler",
                                                 "PassThroughProfiler"};
  return names;
}

// AdvancedProfiler is Python's cProfile in Lightning, which has no C++ meaning: LibTorch's operators here.
ProfilerSpec profiler_class(const std::string& name, const Config& args) {
  const auto& known = profiler_class_names();
  if (std::find(known.begin(), known.end(), name) == known.end())
    throw Error(unknown_name_message("profiler class", name, known) + "; or name one: \"simple\", \"advanced\"");
  if (name == "PassThroughProfiler") return {};
  ProfilerSpec spec(name == "SimpleProfiler" ? "simple" : "advanced");
  spec.dirpath = args.get<std::string>("dirpath", "");
  spec.filename = args.get<std::string>("filename", "");
  const auto at_default = [&](const char* key, const nlohmann::json& lightning_default) {
    const auto value = args.get<nlohmann::json>(key, lightning_default);
    ARC_CHECK(value == lightning_default, name, "'s ", key, "=", value.dump(), " has no counterpart here; leave it at ",
              lightning_default.dump());
  };
  if (name == "SimpleProfiler") at_default("extended", true);  // the report has every column
  if (name == "AdvancedProfiler") {
    at_default("line_count_restriction", 1.0);
    at_default("dump_stats", false);
  }
  if (name == "PyTorchProfiler") {
    spec.row_limit = args.get_optional<int64_t>("row_limit");
    spec.chrome_trace = args.get<bool>("export_to_chrome", true);
    at_default("group_by_input_shapes", false);
    at_default("emit_nvtx", false);
    at_default("sort_by_key", nullptr);
    at_default("record_module_names", true);
    at_default("table_kwargs", nullptr);
  }
  return spec;
}

std::shared_ptr<Profiler> make_profiler(const ProfilerSpec& spec) {
  if (spec.name.empty()) return nullptr;
  std::shared_ptr<Profiler> profiler;
  if (spec.name == "simple") {
    profiler = std::make_shared<SimpleProfiler>();
  } else if (spec.name == "advanced" || spec.name == "pytorch") {
    AdvancedProfiler::Options options;
    options.row_limit(spec.row_limit.value_or(options.row_limit()));
    options.chrome_trace(spec.chrome_trace);
    profiler = std::make_shared<AdvancedProfiler>(options);
  } else {
    throw Error(unknown_name_message("profiler", spec.name, profiler_names()));
  }
  profiler->set_output(spec.dirpath, spec.filename);
  return profiler;
}

}  // namespace arc
