// Optimizer state as raw tensors: a JSON layout entry `<name>` (the optimizer's type, each group's
// options and size, each parameter's step counts and which state tensors it has) and one tensor
// entry `<name>/<parameter index>/<field>` per state tensor, indexed over all groups in order.
#include <arc/fabric/detail/optimizer_state.h>

#include <arc/base/detail/json_integer.h>
#include <arc/base/detail/torch_compat.h>
#include <arc/base/error.h>
#include <arc/fabric/checkpoint.h>
#include <arc/strategies/collectives.h>

#include <torch/torch.h>

#include <string_view>
#include <type_traits>

namespace arc {
namespace {

using torch::optim::Optimizer;

// One LibTorch optimizer type: its classes, its name in the layout, and each option of a group and
// each field of a parameter's state as `field(name, reference)` (const when they are const).
template <typename OptimizerT, typename OptionsT, typename StateT>
struct Types {
  using OptimizerType = OptimizerT;
  using Options = OptionsT;
  using State = StateT;
  /// Whether every parameter has a state from the start (made by the constructor; step() asserts it).
  static constexpr bool always_has_state = false;
};

struct SgdKind : Types<torch::optim::SGD, torch::optim::SGDOptions, torch::optim::SGDParamState> {
  static constexpr const char* type = "SGD";
  template <typename O, typename Field>
  static void each_option(O& o, Field&& field) {
    field("lr", o.lr());
    field("momentum", o.momentum());
    field("dampening", o.dampening());
    field("weight_decay", o.weight_decay());
    field("nesterov", o.nesterov());
  }
  template <typename S, typename Field>
  static void each_field(S& s, Field&& field) {
    field("momentum_buffer", s.momentum_buffer());
  }
  // Whether a parameter's state must hold tensor `field` under options `o`: its step reads it.
  static bool needs(const Options& o, std::string_view field) {
    return field == "momentum_buffer" && o.momentum() != 0;
  }
};

template <typename OptimizerT, typename OptionsT, typename StateT>
struct AdamFamily : Types<OptimizerT, OptionsT, StateT> {
  template <typename O, typename Field>
  static void each_option(O& o, Field&& field) {
    field("lr", o.lr());
    field("betas", o.betas());
    field("eps", o.eps());
    field("weight_decay", o.weight_decay());
    field("amsgrad", o.amsgrad());
  }
  template <typename S, typename Field>
  static void each_field(S& s, Field&& field) {
    field("step", s.step());
    field("exp_avg", s.exp_avg());
    field("exp_avg_sq", s.exp_avg_sq());
    field("max_exp_avg_sq", s.max_exp_avg_sq());
  }
  static bool needs(const OptionsT& o, std::string_view field) {
    return field == "exp_avg" || field == "exp_avg_sq" || (field == "max_exp_avg_sq" && o.amsgrad());
  }
};

struct AdamKind : AdamFamily<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState> {
  static constexpr const char* type = "Adam";
};

struct AdamWKind : AdamFamily<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState> {
  static constexpr const char* type = "AdamW";
};

struct RmspropKind : Types<torch::optim::RMSprop, torch::optim::RMSpropOptions, torch::optim::RMSpropParamState> {
  static constexpr const char* type = "RMSprop";
  template <typename O, typename Field>
  static void each_option(O& o, Field&& field) {
    field("lr", o.lr());
    field("alpha", o.alpha());
    field("eps", o.eps());
    field("weight_decay", o.weight_decay());
    field("momentum", o.momentum());
    field("centered", o.centered());
  }
  template <typename S, typename Field>
  static void each_field(S& s, Field&& field) {
    field("step", s.step());
    field("square_avg", s.square_avg());
    field("momentum_buffer", s.momentum_buffer());
    field("grad_avg", s.grad_avg());
  }
  static bool needs(const Options& o, std::string_view field) {
    return field == "square_avg" || (field == "momentum_buffer" && o.momentum() > 0) ||
           (field == "grad_avg" && o.centered());
  }
};

struct AdagradKind : Types<torch::optim::Adagrad, torch::optim::AdagradOptions, torch::optim::AdagradParamState> {
  static constexpr const char* type = "Adagrad";
  static constexpr bool always_has_state = true;
  template <typename O, typename Field>
  static void each_option(O& o, Field&& field) {
    field("lr", o.lr());
    field("lr_decay", o.lr_decay());
    field("weight_decay", o.weight_decay());
    field("initial_accumulator_value", o.initial_accumulator_value());
    field("eps", o.eps());
  }
  template <typename S, typename Field>
  static void each_field(S& s, Field&& field) {
    field("step", s.step());
    field("sum", s.sum());
  }
  static bool needs(const Options&, std::string_view field) { return field == "sum"; }
};

template <typename T>
constexpr bool is_tensor = std::is_same_v<std::decay_t<T>, torch::Tensor>;

// The tensor entry of a parameter's state field.
std::string field_entry(const std::string& name, size_t parameter, const char* field) {
  return name + "/" + std::to_string(parameter) + "/" + field;
}

// Stores `optimizer` raw when it is a Kind::OptimizerType whose states are all Kind::State.
template <typename Kind>
bool save_raw(CheckpointWriter& writer, const std::string& name, const Optimizer& optimizer) {
  using StateType = typename Kind::State;
  if (dynamic_cast<const typename Kind::OptimizerType*>(&optimizer) == nullptr) return false;
  // A subclass may keep other state: then LibTorch's own serialization is the one that knows it.
  for (const auto& group : optimizer.param_groups())
    for (const auto& parameter : group.params()) {
      const auto* state = compat::param_state(optimizer, parameter);
      if (state != nullptr && dynamic_cast<const StateType*>(state) == nullptr) return false;
    }
  nlohmann::json groups = nlohmann::json::array(), states = nlohmann::json::array();
  size_t index = 0;
  for (const auto& group : optimizer.param_groups()) {
    nlohmann::json options = nlohmann::json::object();
    Kind::each_option(static_cast<const typename Kind::Options&>(group.options()),
                      [&](const char* key, const auto& value) { options[key] = value; });
    groups.push_back({{"options", options}, {"params", group.params().size()}});
    for (const auto& parameter : group.params()) {
      const auto* state = static_cast<const StateType*>(compat::param_state(optimizer, parameter));
      nlohmann::json saved = nullptr;
      if (state != nullptr) {
        saved = {{"scalars", nlohmann::json::object()}, {"tensors", nlohmann::json::array()}};
        Kind::each_field(*state, [&](const char* key, const auto& value) {
          if constexpr (is_tensor<decltype(value)>) {
            if (!value.defined()) return;
            writer.add(field_entry(name, index, key), value);
            saved["tensors"].push_back(key);
          } else {
            saved["scalars"][key] = value;
          }
        });
      }
      states.push_back(std::move(saved));
      ++index;
    }
  }
  writer.add_json(name, {{"type", Kind::type}, {"groups", groups}, {"states", states}});
  return true;
}

// Checks that `optimizer` has groups of the saved sizes, by count and size.
void check_groups(const CheckpointReader& reader, const std::string& name, const std::vector<size_t>& sizes,
                  const Optimizer& optimizer) {
  ARC_CHECK(sizes.size() == optimizer.param_groups().size(), "checkpoint '", reader.path(), "' holds ", sizes.size(),
            " parameter groups for ", name, ", the optimizer has ", optimizer.param_groups().size(),
            "; configure_optimizers() must build the optimizer it was saved with");
  for (size_t g = 0; g < sizes.size(); ++g) {
    const auto saved = sizes[g], now = optimizer.param_groups()[g].params().size();
    ARC_CHECK(saved == now, "checkpoint '", reader.path(), "' holds ", saved, " parameters in group ", g, " of ", name,
              ", the optimizer has ", now, "; configure_optimizers() must build the optimizer it was saved with");
  }
}

// Restores a layout of Kind's type into `optimizer`; false when the layout is of another type. The
// states that `owners` gives to ranks other than `rank` are left out unread.
template <typename Kind>
bool load_raw(const CheckpointReader& reader, const std::string& name, const nlohmann::json& layout,
              Optimizer& optimizer, const std::vector<int64_t>& owners, int64_t rank) {
  using StateType = typename Kind::State;
  if (layout.at("type").get<std::string>() != Kind::type) return false;
  ARC_CHECK(dynamic_cast<typename Kind::OptimizerType*>(&optimizer) != nullptr, "checkpoint '", reader.path(),
            "' holds ", name, " as the state of an optimizer of type ", Kind::type,
            ", but configure_optimizers() returns another type; resume with the optimizer it was saved with");
  std::vector<size_t> sizes;
  for (const auto& group : layout.at("groups"))
    sizes.push_back(static_cast<size_t>(detail::json_integer(group.at("params"), "a parameter group's size")));
  check_groups(reader, name, sizes, optimizer);
  size_t index = 0;
  std::vector<std::pair<std::string, torch::Tensor>> reads;  // read together at the end
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    auto& group = optimizer.param_groups()[g];
    const auto& options = layout.at("groups")[g].at("options");
    Kind::each_option(static_cast<typename Kind::Options&>(group.options()), [&](const char* key, auto& value) {
      value = options.at(key).get<std::decay_t<decltype(value)>>();
    });
    for (const auto& parameter : group.params()) {
      const auto& saved = layout.at("states").at(index);
      const bool others = !owners.empty() && owners.at(index) >= 0 && owners.at(index) != rank;
      ARC_CHECK(!saved.is_null() || others || !Kind::always_has_state, "checkpoint '", reader.path(),
                "' is corrupt: it holds no ", Kind::type, " state for parameter ", index, " of '", name,
                "', which has one from the start; use an earlier one");
      if (saved.is_null() || others) {
        compat::set_param_state(optimizer, parameter, nullptr);
        ++index;
        continue;
      }
      // The state the optimizer already has is refilled in place where it matches (no allocation).
      auto* current = dynamic_cast<StateType*>(compat::param_state(optimizer, parameter));
      auto state = current != nullptr ? std::make_unique<StateType>(*current) : std::make_unique<StateType>();
      const auto& tensors = saved.at("tensors");
      Kind::each_field(*state, [&](const char* key, auto& value) {
        if constexpr (is_tensor<decltype(value)>) {
          const auto entry = field_entry(name, index, key);
          const bool saved_tensor = std::find(tensors.begin(), tensors.end(), key) != tensors.end();
          // What the optimizer's step reads must be there, in the parameter's shape.
          ARC_CHECK(saved_tensor || !Kind::needs(static_cast<const typename Kind::Options&>(group.options()), key),
                    "checkpoint '", reader.path(), "' is corrupt: the ", Kind::type, " state of parameter ", index,
                    " of '", name, "' lacks its '", key, "'; use an earlier one");
          if (saved_tensor) {
            // Floating point, as each optimizer makes it (its precision may differ from the
            // parameter's: a run resumed in another precision).
            const auto [dtype, shape] = reader.tensor_layout(entry);
            ARC_CHECK(shape == parameter.sizes().vec() && c10::isFloatingType(dtype), "checkpoint '", reader.path(),
                      "' is corrupt: '", entry, "' is ", c10::toString(dtype), " of shape ", c10::IntArrayRef(shape),
                      ", its parameter ", parameter.sizes(), "; use an earlier one");
          }
          if (!saved_tensor) {
            value = torch::Tensor();
          } else if (value.defined() && value.device() == parameter.device()) {
            reads.emplace_back(entry, value);
          } else if (parameter.is_cpu()) {
            value = reader.empty_tensor(entry);
            reads.emplace_back(entry, value);
          } else {
            value = reader.tensor(entry).to(parameter.device());
          }
        } else {
          const auto& scalar = saved.at("scalars").at(key);
          if constexpr (std::is_integral_v<std::decay_t<decltype(value)>>) {
            value = detail::json_integer(scalar, key);  // a step count
          } else {
            value = scalar.get<std::decay_t<decltype(value)>>();
          }
        }
      });
      compat::set_param_state(optimizer, parameter, std::move(state));
      ++index;
    }
  }
  reader.read_all_into(reads);
  return true;
}

// Restores a LibTorch archive (what format-2 files hold) into a Kind::OptimizerType. LibTorch's
// Optimizer::load pairs each saved state with a parameter through the text of that parameter's
// address at saving, which LibTorch 1.x wrote in hex ("0x55d4...") and 2.x reads as a decimal
// number: under 2.x every state of a 1.x archive lands on one key, and Adam steps with another
// parameter's state. Here the state saved under the key of a group's i-th parameter goes to the
// group's i-th parameter, whichever LibTorch wrote the text, and each group's options are restored,
// as in format 3.
template <typename Kind>
void restore_archive(torch::serialize::InputArchive& archive, const CheckpointReader& reader, const std::string& name,
                     Optimizer& optimizer) {
  torch::serialize::InputArchive states, groups;
  archive.read("state", states);
  archive.read("param_groups", groups);
  const auto size_of = [](torch::serialize::InputArchive& from, const std::string& key) {
    torch::Tensor size;
    from.read(key, size);
    return static_cast<size_t>(size.item<int64_t>());
  };
  std::vector<torch::serialize::InputArchive> saved_groups(size_of(groups, "param_groups/size"));
  std::vector<size_t> sizes;
  for (size_t g = 0; g < saved_groups.size(); ++g) {
    groups.read("param_groups/" + std::to_string(g), saved_groups[g]);
    sizes.push_back(size_of(saved_groups[g], "params/size"));
  }
  check_groups(reader, name, sizes, optimizer);
  const auto saved_keys = states.keys();
  for (size_t g = 0; g < saved_groups.size(); ++g) {
    auto& group = optimizer.param_groups()[g];
    torch::serialize::InputArchive options;
    saved_groups[g].read("options", options);
    static_cast<typename Kind::Options&>(group.options()).serialize(options);
    for (size_t i = 0; i < group.params().size(); ++i) {
      const auto& parameter = group.params()[i];
      c10::IValue key;
      saved_groups[g].read("params/" + std::to_string(i), key);
      if (std::find(saved_keys.begin(), saved_keys.end(), key.toStringRef()) == saved_keys.end()) {
        compat::set_param_state(optimizer, parameter, nullptr);
        continue;
      }
      torch::serialize::InputArchive saved;
      states.read(key.toStringRef(), saved);
      auto state = std::make_unique<typename Kind::State>();
      state->serialize(saved);
      Kind::each_field(*state, [&](const char*, auto& value) {
        if constexpr (is_tensor<decltype(value)>)
          if (value.defined()) value = value.to(parameter.device());
      });
      compat::set_param_state(optimizer, parameter, std::move(state));
    }
  }
}

// restore_archive when `optimizer` is a Kind::OptimizerType; false when it is not. An archive that
// this type cannot read (another optimizer's: format 2 did not store the type) is an error saying so.
template <typename Kind>
bool load_archived(torch::serialize::InputArchive& archive, const CheckpointReader& reader, const std::string& name,
                   Optimizer& optimizer) {
  if (dynamic_cast<typename Kind::OptimizerType*>(&optimizer) == nullptr) return false;
  try {
    restore_archive<Kind>(archive, reader, name, optimizer);
  } catch (const c10::Error& error) {
    ARC_FAIL("checkpoint '", reader.path(), "' holds ", name, " as a LibTorch archive that LibTorch's ", Kind::type,
             " cannot read (LibTorch: ", error.what_without_backtrace(),
             "); configure_optimizers() must build the optimizer it was saved with");
  }
  return true;
}

// The types stored raw, tried in order: the first that matches saves or restores.
// Sends each state that a rank other than 0 keeps to rank 0 (its scalars and which tensors it has
// as text, then each tensor), when `optimizer` is a Kind::OptimizerType; false otherwise.
template <typename Kind>
bool gather_raw(Optimizer& optimizer, const std::vector<int64_t>& owners, Collectives& group) {
  using StateType = typename Kind::State;
  if (dynamic_cast<typename Kind::OptimizerType*>(&optimizer) == nullptr) return false;
  const int64_t rank = group.rank();
  size_t index = 0;
  for (auto& group_of_parameters : optimizer.param_groups())
    for (auto& parameter : group_of_parameters.params()) {
      const int64_t owner = owners.at(index++);
      if (owner <= 0) continue;
      const auto* held = rank == owner ? dynamic_cast<StateType*>(compat::param_state(optimizer, parameter)) : nullptr;
      nlohmann::json layout = nullptr;
      if (held != nullptr) {
        layout = {{"scalars", nlohmann::json::object()}, {"tensors", nlohmann::json::object()}};
        Kind::each_field(*held, [&](const char* key, const auto& value) {
          if constexpr (is_tensor<decltype(value)>) {
            if (value.defined())
              layout["tensors"][key] = {{"sizes", value.sizes().vec()},
                                        {"type", static_cast<int>(value.scalar_type())}};
          } else {
            layout["scalars"][key] = value;
          }
        });
      }
      layout = nlohmann::json::parse(broadcast_text(group, layout.dump(), owner));
      if (layout.is_null()) {
        if (rank == 0) compat::set_param_state(optimizer, parameter, nullptr);
        continue;
      }
      auto state = std::make_unique<StateType>();
      Kind::each_field(*state, [&](const char* key, auto& value) {
        if constexpr (is_tensor<decltype(value)>) {
          if (!layout["tensors"].contains(key)) return;
          const auto& entry = layout["tensors"][key];
          torch::Tensor received;
          if (held != nullptr) {
            Kind::each_field(*held, [&](const char* own_key, const auto& own) {
              if constexpr (is_tensor<decltype(own)>)
                if (std::string(own_key) == key) received = own.contiguous();
            });
          } else {
            received = torch::empty(
                entry.at("sizes").template get<std::vector<int64_t>>(),
                parameter.options().dtype(static_cast<torch::ScalarType>(entry.at("type").template get<int>())));
          }
          group.broadcast(received, owner);
          value = received;
        } else {
          value = layout["scalars"].at(key).template get<std::decay_t<decltype(value)>>();
        }
      });
      if (rank == 0) compat::set_param_state(optimizer, parameter, std::move(state));
    }
  return true;
}

template <typename... Kinds>
struct RawKinds {
  static bool save(CheckpointWriter& writer, const std::string& name, const Optimizer& optimizer) {
    return (save_raw<Kinds>(writer, name, optimizer) || ...);
  }
  static bool load(const CheckpointReader& reader, const std::string& name, const nlohmann::json& layout,
                   Optimizer& optimizer, const std::vector<int64_t>& owners, int64_t rank) {
    return (load_raw<Kinds>(reader, name, layout, optimizer, owners, rank) || ...);
  }
  static bool gather(Optimizer& optimizer, const std::vector<int64_t>& owners, Collectives& group) {
    return (gather_raw<Kinds>(optimizer, owners, group) || ...);
  }
  static bool load_archive(torch::serialize::InputArchive& archive, const CheckpointReader& reader,
                           const std::string& name, Optimizer& optimizer) {
    return (load_archived<Kinds>(archive, reader, name, optimizer) || ...);
  }
};
using Shipped = RawKinds<SgdKind, AdamKind, AdamWKind, RmspropKind, AdagradKind>;

}  // namespace

void save_optimizer(CheckpointWriter& writer, const std::string& name, const Optimizer& optimizer) {
  if (Shipped::save(writer, name, optimizer)) return;
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  writer.add(name, std::move(archive));
}

void load_optimizer(const CheckpointReader& reader, const std::string& name, Optimizer& optimizer,
                    const std::vector<int64_t>& owners, int64_t rank) {
  if (reader.holds_archive(name)) {
    auto archive = reader.archive(name);
    if (!Shipped::load_archive(archive, reader, name, optimizer)) optimizer.load(archive);
    if (!owners.empty()) keep_own_optimizer_state(optimizer, owners, rank);
    return;
  }
  const auto& layout = reader.json(name);
  ARC_CHECK(Shipped::load(reader, name, layout, optimizer, owners, rank), "checkpoint '", reader.path(), "' holds ",
            name, " as a ", layout.at("type").get<std::string>(),
            " optimizer, which this Arclight cannot restore; load it with the Arclight that wrote it");
}

void gather_optimizer_state(Optimizer& optimizer, const std::vector<int64_t>& owners, Collectives& group) {
  ARC_CHECK(Shipped::gather(optimizer, owners, group), "a sharded optimizer's state can be gathered for SGD, ",
            "Adam, AdamW, RMSprop and Adagrad only");
}

nlohmann::json merge_optimizer_layouts(const std::vector<nlohmann::json>& layouts) {
  nlohmann::json merged = layouts.at(0);
  ARC_CHECK(merged.is_object() && merged.contains("states"), "a sharded checkpoint holds the optimizer states of ",
            "LibTorch's SGD, Adam, AdamW, RMSprop and Adagrad only; use one of them, or state_dict_type \"full\"");
  auto& states = merged.at("states");
  for (const auto& layout : layouts) {
    ARC_CHECK(layout.is_object() && layout.contains("states") && layout.at("states").size() == states.size(),
              "the ranks' optimizers differ in their parameters; every rank's configure_optimizers() must build ",
              "the same optimizers");
    for (size_t i = 0; i < states.size(); ++i)
      if (states[i].is_null()) states[i] = layout.at("states")[i];
  }
  return merged;
}

void keep_own_optimizer_state(Optimizer& optimizer, const std::vector<int64_t>& owners, int64_t rank) {
  size_t index = 0;
  for (auto& group : optimizer.param_groups())
    for (auto& parameter : group.params()) {
      const int64_t owner = owners.at(index++);
      if (owner >= 0 && owner != rank) compat::set_param_state(optimizer, parameter, nullptr);
    }
}

}  // namespace arc
