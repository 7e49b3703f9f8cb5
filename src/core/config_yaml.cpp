// config_to_yaml(): the resolved configuration written as a deck, one key of
// the table (config_fields.hpp) after another, so that parse_config_text()
// reads it back into an equal Config. Beside config_json.cpp, the same walk
// written as JSON.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <variant>

#include "core/config.hpp"
#include "core/config_fields.hpp"

namespace miniattn {

using config_fields::Field;
using config_fields::format_real;
using config_fields::Overloaded;

std::string config_to_yaml(const Config& c) {
  Config& values = const_cast<Config&>(c);  // read only
  YAML::Emitter out;
  std::string deck = c.deck_path;
  std::replace(deck.begin(), deck.end(), '\n', ' ');  // a comment is one line
  std::replace(deck.begin(), deck.end(), '\r', ' ');
  out << YAML::Comment("miniattn configuration" + (deck.empty() ? std::string() : ", deck " + deck));
  out << YAML::BeginMap;
  for (const std::string& section : config_fields::sections()) {
    out << YAML::Key << section << YAML::Value << YAML::BeginMap;
    for (const Field& field : config_fields::fields()) {
      if (field.section != section) continue;
      out << YAML::Key << field.key << YAML::Value;
      std::visit(Overloaded{
                     [&](config_fields::IntegerRef ref) { out << ref(values); },
                     [&](config_fields::UnsignedRef ref) { out << ref(values); },
                     [&](config_fields::RealRef ref) { out << format_real(ref(values)); },
                     [&](config_fields::BooleanRef ref) { out << YAML::TrueFalseBool << ref(values); },
                     [&](config_fields::TextRef ref) { out << YAML::DoubleQuoted << ref(values); },
                     [&](config_fields::EnumRef ref) { out << ref.names()[ref.get(values)]; },
                 },
                 field.ref);
    }
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  if (!out.good()) throw std::logic_error("config_to_yaml: " + out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

}  // namespace miniattn
