// YAML for configs and the files Lightning writes as YAML: to_yaml writes JSON as block-style YAML
// (hparams.yaml, config.yaml); from_yaml reads a config file so that no value changes meaning
// silently. LibTorch-free: the `arc` launcher reads configs too.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>

namespace arc {

/// `value` as a YAML document (block mappings and sequences; "{}" and "[]" when empty). Strings are
/// always quoted, so that reading it back gives the same values.
std::string to_yaml(const nlohmann::json& value);

/// The YAML document `text` as JSON. Plain scalars resolve as YAML 1.2's core schema (true/false,
/// null/~/empty, integers, floats such as 1e-3 and .5), quoted ones stay strings; yes/no/on/off,
/// booleans in YAML 1.1 but text in 1.2, are an error that says to write true/false or quote them.
/// Errors name `source`, the line and the key path ("run.yaml:4: trainer.deterministic: ...").
/// Text that is not UTF-8 is an error naming `source` and the byte's line.
nlohmann::json from_yaml(const std::string& text, const std::string& source);

/// Throws an arc::Error naming `source`, the line and the byte where `text` stops being UTF-8 (a
/// byte no UTF-8 sequence has, a sequence cut short, an overlong or surrogate encoding); configs and
/// overrides are JSON strings, which hold UTF-8 only.
void check_utf8(const std::string& text, const std::string& source);

}  // namespace arc
