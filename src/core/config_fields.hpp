#pragma once
// Internal to src/core: the table of every deck key (section, key, where it
// lives in Config, its type and allowed values). The parser, the YAML and
// JSON writers and operator== all walk this one table, so a key added here is
// read, checked, written and compared everywhere.
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/config.hpp"

namespace miniattn::config_fields {

using IntegerRef = std::int64_t& (*)(Config&);
using UnsignedRef = std::uint64_t& (*)(Config&);
using RealRef = double& (*)(Config&);
using BooleanRef = bool& (*)(Config&);
using TextRef = std::string& (*)(Config&);
using PrecisionRef = Precision& (*)(Config&);
using FieldRef = std::variant<IntegerRef, UnsignedRef, RealRef, BooleanRef, TextRef, PrecisionRef>;

struct Field {
  std::string section;
  std::string key;
  FieldRef ref;
  std::vector<std::string> choices;  // non-empty: the value must be one of these
  std::string name() const { return section + "." + key; }
};

// In deck order: model, parallel, train, io, run, kernels; keys in the order
// of the structs in config.hpp.
const std::vector<Field>& fields();
const std::vector<std::string>& sections();

}  // namespace miniattn::config_fields
