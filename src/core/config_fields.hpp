#pragma once
// Internal to src/core: the table of every deck key (section, key, where it
// lives in Config, its type and allowed values). The parser, the validator,
// the YAML and JSON writers and operator== all walk this one table, so a key
// added here is read, checked, written and compared everywhere.
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
// An enumeration: its value as the index of its deck word in names().
struct EnumRef {
  std::size_t (*get)(const Config&);
  void (*set)(Config&, std::size_t);
  const std::vector<std::string>& (*names)();
};
using FieldRef = std::variant<IntegerRef, UnsignedRef, RealRef, BooleanRef, TextRef, EnumRef>;

struct Field {
  std::string section;
  std::string key;
  FieldRef ref;
  std::string name() const { return section + "." + key; }
  // The deck words an enumeration takes; empty for other types.
  std::vector<std::string> choices() const;
};

// In deck order: model, parallel, train, io, run, kernels; keys in the order
// of the structs in config.hpp.
const std::vector<Field>& fields();
const std::vector<std::string>& sections();

// One lambda per FieldRef alternative, for std::visit over a field's ref: the
// parser, the YAML writer and operator== each visit the table this way.
template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// Text helpers of the parser's and the validator's messages (config_fields.cpp).
std::string join(const std::vector<std::string>& items, const char* separator = ", ");
// The shortest decimal text that reads back as exactly the same double,
// always with a '.' in the mantissa so that YAML 1.1 readers see a float.
std::string format_real(double value);

}  // namespace miniattn::config_fields
