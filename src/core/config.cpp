// The input deck: YAML (yaml-cpp) read into Config through one table of keys,
// "--set section.key=value" overrides parsed as YAML scalars through the same
// type checks, then validate_config(). Every error is an InputError that
// starts with "section.key: " (or the deck's file name for a file that cannot
// be read or is not YAML) and says why.
#include "core/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

#include "core/config_fields.hpp"
#include "core/error.hpp"

namespace miniattn {

namespace {

using config_fields::Field;
using config_fields::join;
using config_fields::Overloaded;

bool contains(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

// ---------------------------------------------------------------- hints

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Edit distance with adjacent transpositions counted as one edit.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1, 0));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

// The candidate closest to name, or "" when none is close enough to suggest.
std::string closest_match(const std::string& name, const std::vector<std::string>& candidates) {
  const std::string needle = lower(name);
  std::string best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(needle, lower(candidate));
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  const std::size_t limit = std::min<std::size_t>(2, std::max<std::size_t>(1, needle.size() / 3));
  return best_distance <= limit ? best : std::string();
}

// ---------------------------------------------------------------- where a value came from

// Appended to a message: " (at deck.yaml:3:10)" or " (in --set model.vocab=x)".
struct Origin {
  std::string deck_name;     // file name, or "" for deck text
  std::string override_text; // non-empty for a --set value

  std::string where(const YAML::Node& node) const {
    if (!override_text.empty()) return " (in --set " + override_text + ")";
    return where(node.Mark());
  }
  std::string where(const YAML::Mark& mark) const {
    if (!override_text.empty()) return " (in --set " + override_text + ")";
    if (mark.is_null()) return deck_name.empty() ? std::string() : " (in " + deck_name + ")";
    const std::string line = std::to_string(mark.line + 1), column = std::to_string(mark.column + 1);
    if (deck_name.empty()) return " (at line " + line + ", column " + column + ")";
    return " (at " + deck_name + ":" + line + ":" + column + ")";
  }
};

// ---------------------------------------------------------------- scalar conversion

enum class NumberStatus { ok, malformed, out_of_range };

bool all_digits(const std::string& s, std::size_t from) {
  if (from >= s.size()) return false;
  for (std::size_t i = from; i < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

NumberStatus parse_integer_text(const std::string& s, std::int64_t& out) {
  const std::size_t first = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  if (!all_digits(s, first)) return NumberStatus::malformed;
  errno = 0;
  const long long value = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return NumberStatus::out_of_range;
  out = static_cast<std::int64_t>(value);
  return NumberStatus::ok;
}

NumberStatus parse_unsigned_text(const std::string& s, std::uint64_t& out) {
  const std::size_t first = (!s.empty() && s[0] == '+') ? 1 : 0;
  if (!all_digits(s, first)) return NumberStatus::malformed;
  errno = 0;
  const unsigned long long value = std::strtoull(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return NumberStatus::out_of_range;
  out = static_cast<std::uint64_t>(value);
  return NumberStatus::ok;
}

// Decimal numbers only: [sign] digits [. digits] [e [sign] digits]; no hex,
// no inf/nan (YAML's .inf and .nan included).
NumberStatus parse_real_text(const std::string& s, double& out) {
  bool digit_seen = false;
  for (char ch : s) {
    if (std::isdigit(static_cast<unsigned char>(ch))) {
      digit_seen = true;
    } else if (ch != '+' && ch != '-' && ch != '.' && ch != 'e' && ch != 'E') {
      return NumberStatus::malformed;
    }
  }
  if (!digit_seen) return NumberStatus::malformed;
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0') return NumberStatus::malformed;
  if (!std::isfinite(value)) return NumberStatus::out_of_range;
  out = value;
  return NumberStatus::ok;
}


std::string expectation(const Field& field) {
  if (!field.choices().empty()) return "one of " + join(field.choices());
  return std::visit(Overloaded{
                        [](config_fields::IntegerRef) { return std::string("an integer"); },
                        [](config_fields::UnsignedRef) { return std::string("a non-negative integer"); },
                        [](config_fields::RealRef) { return std::string("a number"); },
                        [](config_fields::BooleanRef) { return std::string("true or false"); },
                        [](config_fields::TextRef) { return std::string("a string"); },
                        [](config_fields::EnumRef) { return std::string("one of the listed words"); },
                    },
                    field.ref);
}

std::string describe_node(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "an empty value";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      break;
  }
  return "'" + node.Scalar() + "'";
}

// A scalar written in quotes (or tagged !!str) is a string, never a number or a boolean.
bool is_quoted_string(const YAML::Node& node) {
  return node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str";
}

// Reads one value into its field, with the field's type rules.
void assign_value(Config& config, const Field& field, const YAML::Node& node, const Origin& origin) {
  const std::string where = origin.where(node);
  auto fail = [&](const std::string& reason) -> void { throw InputError(field.name() + ": " + reason + where); };
  const bool free_text = std::holds_alternative<config_fields::TextRef>(field.ref);

  if (!node.IsScalar()) {
    if (node.IsNull() && free_text) {
      std::get<config_fields::TextRef>(field.ref)(config).clear();
      return;
    }
    fail("expected " + expectation(field) + ", got " + describe_node(node));
  }
  const std::string& text = node.Scalar();
  const bool typed = std::holds_alternative<config_fields::IntegerRef>(field.ref) ||
                     std::holds_alternative<config_fields::UnsignedRef>(field.ref) ||
                     std::holds_alternative<config_fields::RealRef>(field.ref) ||
                     std::holds_alternative<config_fields::BooleanRef>(field.ref);
  if (typed && is_quoted_string(node)) {
    fail("expected " + expectation(field) + ", got the quoted string '" + text + "'");
  }
  const std::vector<std::string> choices = field.choices();
  if (!choices.empty() && !contains(choices, text)) fail("expected one of " + join(choices) + ", got '" + text + "'");

  std::visit(Overloaded{
                 [&](config_fields::IntegerRef ref) {
                   std::int64_t value = 0;
                   const NumberStatus status = parse_integer_text(text, value);
                   if (status == NumberStatus::malformed) fail("expected an integer, got '" + text + "'");
                   if (status == NumberStatus::out_of_range) {
                     fail("integer out of range (must fit in 64 bits), got '" + text + "'");
                   }
                   ref(config) = value;
                 },
                 [&](config_fields::UnsignedRef ref) {
                   std::uint64_t value = 0;
                   const NumberStatus status = parse_unsigned_text(text, value);
                   if (status == NumberStatus::malformed) {
                     fail("expected a non-negative integer, got '" + text + "'");
                   }
                   if (status == NumberStatus::out_of_range) {
                     fail("integer out of range (must fit in 64 bits unsigned), got '" + text + "'");
                   }
                   ref(config) = value;
                 },
                 [&](config_fields::RealRef ref) {
                   double value = 0.0;
                   const NumberStatus status = parse_real_text(text, value);
                   if (status == NumberStatus::malformed) fail("expected a number, got '" + text + "'");
                   if (status == NumberStatus::out_of_range) {
                     fail("number out of range (must be finite), got '" + text + "'");
                   }
                   ref(config) = value;
                 },
                 [&](config_fields::BooleanRef ref) {
                   if (text == "true" || text == "True" || text == "TRUE") {
                     ref(config) = true;
                   } else if (text == "false" || text == "False" || text == "FALSE") {
                     ref(config) = false;
                   } else {
                     fail("expected true or false, got '" + text + "'");
                   }
                 },
                 [&](config_fields::TextRef ref) { ref(config) = text; },
                 [&](config_fields::EnumRef ref) {
                   ref.set(config, static_cast<std::size_t>(std::find(choices.begin(), choices.end(), text) -
                                                            choices.begin()));
                 },
             },
             field.ref);
}

std::vector<std::string> keys_of(const std::string& section) {
  std::vector<std::string> keys;
  for (const Field& field : config_fields::fields()) {
    if (field.section == section) keys.push_back(field.key);
  }
  return keys;
}

[[noreturn]] void unknown_section(const std::string& section, const std::string& where) {
  std::string message = section + ": unknown section (known: " + join(config_fields::sections());
  const std::string hint = closest_match(section, config_fields::sections());
  if (!hint.empty()) message += "; did you mean " + hint + "?";
  throw InputError(message + ")" + where);
}

[[noreturn]] void unknown_key(const std::string& section, const std::string& key, const std::string& where) {
  const std::vector<std::string> keys = keys_of(section);
  std::string message = section + "." + key + ": unknown key in section " + section;
  const std::string hint = closest_match(key, keys);
  if (!hint.empty()) {
    message += " (did you mean " + hint + "?)";
  } else {
    message += " (known: " + join(keys) + ")";
  }
  throw InputError(message + where);
}

const Field& find_field(const std::string& section, const std::string& key, const std::string& where) {
  if (!contains(config_fields::sections(), section)) unknown_section(section, where);
  for (const Field& field : config_fields::fields()) {
    if (field.section == section && field.key == key) return field;
  }
  unknown_key(section, key, where);
}

// The deck's top-level mapping, section by section.
void apply_deck(Config& config, const YAML::Node& root, const std::string& display_name, const Origin& origin) {
  if (!root || root.IsNull()) return;  // an empty deck: every default
  if (!root.IsMap()) {
    throw InputError(display_name + ": a deck must be a YAML mapping of sections (" + join(config_fields::sections()) +
                     "), got " + describe_node(root) + origin.where(root));
  }
  std::set<std::string> seen_sections;
  for (const auto& section_entry : root) {
    const YAML::Node& section_node = section_entry.first;
    const YAML::Node& body = section_entry.second;
    if (!section_node.IsScalar()) {
      throw InputError(display_name + ": section names must be plain words (" + join(config_fields::sections()) +
                       "), got " + describe_node(section_node) + origin.where(section_node));
    }
    const std::string section = section_node.Scalar();
    if (!contains(config_fields::sections(), section)) unknown_section(section, origin.where(section_node));
    if (!seen_sections.insert(section).second) {
      throw InputError(section + ": section given twice in the deck" + origin.where(section_node));
    }
    if (body.IsNull()) continue;  // "model:" with nothing under it
    if (!body.IsMap()) {
      throw InputError(section + ": a section must be a mapping of keys (" + join(keys_of(section)) + "), got " +
                       describe_node(body) + origin.where(body));
    }
    std::set<std::string> seen_keys;
    for (const auto& entry : body) {
      const YAML::Node& key_node = entry.first;
      if (!key_node.IsScalar()) {
        throw InputError(section + ": keys must be plain words (" + join(keys_of(section)) + "), got " +
                         describe_node(key_node) + origin.where(key_node));
      }
      const std::string key = key_node.Scalar();
      // A named location, not a temporary: g++ 13 took the returned table entry for one bound to it.
      const std::string where = origin.where(key_node);
      const Field& field = find_field(section, key, where);
      if (!seen_keys.insert(key).second) {
        throw InputError(field.name() + ": key given twice in section " + section + where);
      }
      assign_value(config, field, entry.second, origin);
    }
  }
}

void apply_override(Config& config, const std::string& text) {
  const Override parsed = split_override(text);
  Origin origin;
  origin.override_text = text;
  const std::string where = origin.where(YAML::Mark::null_mark());
  const Field& field = find_field(parsed.section, parsed.key, where);
  YAML::Node value;
  try {
    value = YAML::Load(parsed.value);
  } catch (const YAML::Exception& error) {
    throw InputError(field.name() + ": the value '" + parsed.value + "' is not a valid YAML scalar (" + error.msg +
                     ")" + where);
  }
  assign_value(config, field, value, origin);
}

Config parse_text(const std::string& text, const std::string& deck_path, const std::string& display_name,
                  const std::vector<std::string>& overrides, int world_size) {
  if (world_size < 1) throw std::invalid_argument("parse_config: world_size must be >= 1");
  Origin origin;
  origin.deck_name = deck_path;
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(text);
  } catch (const YAML::Exception& error) {
    std::string where;
    if (!error.mark.is_null()) {
      where = " at line " + std::to_string(error.mark.line + 1) + ", column " + std::to_string(error.mark.column + 1);
    }
    throw InputError(display_name + ": not valid YAML" + where + ": " + error.msg);
  }
  if (documents.size() > 1) {
    throw InputError(display_name + ": holds " + std::to_string(documents.size()) +
                     " YAML documents; a deck is a single mapping of sections");
  }
  Config config;
  config.deck_path = deck_path;
  if (!documents.empty()) apply_deck(config, documents.front(), display_name, origin);
  for (const std::string& override_text : overrides) apply_override(config, override_text);
  validate_config(config, world_size);
  return config;
}

}  // namespace

// ---------------------------------------------------------------- public

Override split_override(const std::string& text) {
  const std::string example = " (e.g. --set model.heads=8)";
  const std::size_t equals = text.find('=');
  if (equals == std::string::npos) {
    throw InputError("--set '" + text + "': expected section.key=value, found no '='" + example);
  }
  std::string name = text.substr(0, equals);
  const auto not_space = [](unsigned char ch) { return !std::isspace(ch); };
  name.erase(name.begin(), std::find_if(name.begin(), name.end(), not_space));
  name.erase(std::find_if(name.rbegin(), name.rend(), not_space).base(), name.end());
  const std::size_t dot = name.find('.');
  if (dot == std::string::npos || dot == 0) {
    throw InputError("--set '" + text + "': expected section.key=value, found no section before the key" + example);
  }
  if (dot + 1 == name.size()) {
    throw InputError("--set '" + text + "': expected section.key=value, found no key after the section" + example);
  }
  Override parsed;
  parsed.section = name.substr(0, dot);
  parsed.key = name.substr(dot + 1);
  parsed.value = text.substr(equals + 1);
  return parsed;
}

Config parse_config_text(const std::string& yaml_text, const std::vector<std::string>& overrides, int world_size) {
  return parse_text(yaml_text, "", "deck text", overrides, world_size);
}

Config parse_config(const std::string& deck_path, const std::vector<std::string>& overrides, int world_size) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(deck_path, error);
  if (deck_path.empty()) throw InputError("input deck: no file name given");
  if (!fs::exists(status)) throw InputError(deck_path + ": cannot read the input deck: no such file");
  if (fs::is_directory(status)) throw InputError(deck_path + ": cannot read the input deck: it is a directory");
  std::ifstream in(deck_path, std::ios::binary);
  if (!in) {
    throw InputError(deck_path + ": cannot read the input deck: " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(deck_path + ": cannot read the input deck: read error");
  return parse_text(text.str(), deck_path, deck_path, overrides, world_size);
}


std::string flight_record_folder(const RunConfig& run) {
  if (!run.flight_record.empty()) return run.flight_record;
  if (run.result.empty()) return "miniattn.flight-record";
  const std::filesystem::path result(run.result);
  return (result.parent_path() / (result.stem().string() + ".flight-record")).string();
}

std::vector<std::int64_t> parse_predict_seq_lens(const std::string& text) {
  std::vector<std::int64_t> values;
  std::stringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    std::int64_t value = 0;
    if (parse_integer_text(item, value) != NumberStatus::ok || value < 1 || value > (std::int64_t{1} << 31)) {
      throw InputError("run.predict_seq_lens: expected comma-separated integers in [1, 2^31] (e.g. \"65536,262144\"), "
                       "got '" + text + "'");
    }
    values.push_back(value);
  }
  if (values.empty())
    throw InputError("run.predict_seq_lens: expected at least one sequence length, got '" + text + "'");
  return values;
}

}  // namespace miniattn
