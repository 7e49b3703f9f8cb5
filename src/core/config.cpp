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
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "core/config_fields.hpp"
#include "core/error.hpp"

namespace miniattn {

namespace config_fields {

#define MINIATTN_CONFIG_REF(section, key) \
  +[](Config& c) -> decltype((c.section.key)) { return c.section.key; }
#define MINIATTN_CONFIG_ENUM(section, key)                                                                  \
  EnumRef {                                                                                                 \
    +[](const Config& c) { return static_cast<std::size_t>(c.section.key); },                               \
        +[](Config& c, std::size_t i) { c.section.key = static_cast<decltype(c.section.key)>(i); },          \
        &enum_names<std::decay_t<decltype(Config().section.key)>>                                          \
  }

const std::vector<Field>& fields() {
  static const std::vector<Field> table = {
      {"model", "vocab", MINIATTN_CONFIG_REF(model, vocab)},
      {"model", "d_model", MINIATTN_CONFIG_REF(model, d_model)},
      {"model", "heads", MINIATTN_CONFIG_REF(model, heads)},
      {"model", "kv_heads", MINIATTN_CONFIG_REF(model, kv_heads)},
      {"model", "ffn", MINIATTN_CONFIG_REF(model, ffn)},
      {"model", "layers", MINIATTN_CONFIG_REF(model, layers)},
      {"model", "seq_len", MINIATTN_CONFIG_REF(model, seq_len)},
      {"model", "batch", MINIATTN_CONFIG_REF(model, batch)},
      {"model", "causal", MINIATTN_CONFIG_REF(model, causal)},
      {"model", "window", MINIATTN_CONFIG_REF(model, window)},
      {"model", "precision", MINIATTN_CONFIG_ENUM(model, precision)},
      {"model", "positions", MINIATTN_CONFIG_ENUM(model, positions)},
      {"model", "rope_theta", MINIATTN_CONFIG_REF(model, rope_theta)},
      {"parallel", "strategy", MINIATTN_CONFIG_ENUM(parallel, strategy)},
      {"parallel", "layout", MINIATTN_CONFIG_ENUM(parallel, layout)},
      {"parallel", "dp", MINIATTN_CONFIG_REF(parallel, dp)},
      {"parallel", "tp", MINIATTN_CONFIG_REF(parallel, tp)},
      {"parallel", "pp", MINIATTN_CONFIG_REF(parallel, pp)},
      {"parallel", "ulysses_degree", MINIATTN_CONFIG_REF(parallel, ulysses_degree)},
      {"parallel", "comm", MINIATTN_CONFIG_ENUM(parallel, comm)},
      {"parallel", "gpu_aware_mpi", MINIATTN_CONFIG_ENUM(parallel, gpu_aware_mpi)},
      {"train", "steps", MINIATTN_CONFIG_REF(train, steps)},
      {"train", "micro_batches", MINIATTN_CONFIG_REF(train, micro_batches)},
      {"train", "lr", MINIATTN_CONFIG_REF(train, lr)},
      {"train", "optimizer", MINIATTN_CONFIG_ENUM(train, optimizer)},
      {"train", "weight_decay", MINIATTN_CONFIG_REF(train, weight_decay)},
      {"train", "grad_clip", MINIATTN_CONFIG_REF(train, grad_clip)},
      {"train", "seed", MINIATTN_CONFIG_REF(train, seed)},
      {"train", "beta1", MINIATTN_CONFIG_REF(train, beta1)},
      {"train", "beta2", MINIATTN_CONFIG_REF(train, beta2)},
      {"train", "eps", MINIATTN_CONFIG_REF(train, eps)},
      {"train", "nan_check", MINIATTN_CONFIG_REF(train, nan_check)},
      {"io", "init", MINIATTN_CONFIG_REF(io, init)},
      {"io", "snapshot", MINIATTN_CONFIG_REF(io, snapshot)},
      {"io", "snapshot_step", MINIATTN_CONFIG_REF(io, snapshot_step)},
      {"io", "checkpoint", MINIATTN_CONFIG_REF(io, checkpoint)},
      {"io", "checkpoint_every", MINIATTN_CONFIG_REF(io, checkpoint_every)},
      {"io", "restart", MINIATTN_CONFIG_REF(io, restart)},
      {"run", "mode", MINIATTN_CONFIG_ENUM(run, mode)},
      {"run", "log_every", MINIATTN_CONFIG_REF(run, log_every)},
      {"run", "result", MINIATTN_CONFIG_REF(run, result)},
      {"run", "memory_per_rank_gib", MINIATTN_CONFIG_REF(run, memory_per_rank_gib)},
      {"run", "machine", MINIATTN_CONFIG_REF(run, machine)},
      {"run", "predict_max_ranks", MINIATTN_CONFIG_REF(run, predict_max_ranks)},
      {"run", "predict_seq_lens", MINIATTN_CONFIG_REF(run, predict_seq_lens)},
      {"kernels", "attention", MINIATTN_CONFIG_ENUM(kernels, attention)},
      {"kernels", "chunk", MINIATTN_CONFIG_REF(kernels, chunk)},
      {"kernels", "query_block", MINIATTN_CONFIG_REF(kernels, query_block)},
      {"kernels", "key_block", MINIATTN_CONFIG_REF(kernels, key_block)},
      {"data", "task", MINIATTN_CONFIG_ENUM(data, task)},
      {"data", "documents", MINIATTN_CONFIG_REF(data, documents)},
  };
  return table;
}

#undef MINIATTN_CONFIG_REF
#undef MINIATTN_CONFIG_ENUM

std::vector<std::string> Field::choices() const {
  if (const auto* e = std::get_if<EnumRef>(&ref)) return e->names();
  return {};
}

const std::vector<std::string>& sections() {
  static const std::vector<std::string> names = {"model", "parallel", "train", "io", "run", "kernels", "data"};
  return names;
}

}  // namespace config_fields

namespace {

using config_fields::Field;

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

std::string join(const std::vector<std::string>& items, const char* separator = ", ") {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += items[i];
  }
  return out;
}

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

// The shortest decimal text that reads back as exactly the same double,
// always with a '.' in the mantissa so that YAML 1.1 readers see a float.
std::string format_real(double value) {
  char buffer[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  std::string text = buffer;
  if (!std::isfinite(value)) return text;
  if (text.find('.') == std::string::npos) {
    const std::size_t e = text.find_first_of("eE");
    if (e == std::string::npos) {
      text += ".0";
    } else {
      text.insert(e, ".0");
    }
  }
  return text;
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
                   if (status == NumberStatus::out_of_range) fail("number out of range (must be finite), got '" + text + "'");
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
      const Field& field = find_field(section, key, origin.where(key_node));
      if (!seen_keys.insert(key).second) {
        throw InputError(field.name() + ": key given twice in section " + section + origin.where(key_node));
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

// ---------------------------------------------------------------- validation

[[noreturn]] void reject(const std::string& key, const std::string& reason) { throw InputError(key + ": " + reason); }

void require_at_least(const std::string& key, std::int64_t value, std::int64_t minimum, const std::string& note = "") {
  if (value < minimum) {
    reject(key, "must be >= " + std::to_string(minimum) + note + ", got " + std::to_string(value));
  }
}

std::string number_text(double value) { return format_real(value); }

// a * b for non-negative operands; false on overflow of int64.
bool multiply(std::int64_t a, std::int64_t b, std::int64_t& out) {
  if (a != 0 && b > std::numeric_limits<std::int64_t>::max() / a) return false;
  out = a * b;
  return true;
}

bool add(std::int64_t a, std::int64_t b, std::int64_t& out) {
  if (b > std::numeric_limits<std::int64_t>::max() - a) return false;
  out = a + b;
  return true;
}

// Every array size the run will index must fit in int64.
void check_sizes(const ModelConfig& m) {
  constexpr std::int64_t max_seq_len = std::int64_t{1} << 31;
  if (m.seq_len > max_seq_len) {
    reject("model.seq_len", "must be <= 2^31 = " + std::to_string(max_seq_len) + ", got " + std::to_string(m.seq_len));
  }
  struct Product {
    const char* key;
    const char* what;
    std::vector<std::int64_t> factors;
    const char* formula;
  };
  std::int64_t ffn_width = 0;
  if (!multiply(4, m.d_model, ffn_width)) {
    reject("model.d_model", "4 * model.d_model (the default model.ffn) overflows a 64-bit integer");
  }
  if (m.ffn > 0) ffn_width = m.ffn;
  const std::vector<Product> products = {
      {"model.vocab", "the embedding wte", {m.vocab, m.d_model}, "model.vocab * model.d_model"},
      {"model.seq_len", "the embedding wpe or the rotary table", {m.seq_len, m.d_model}, "model.seq_len * model.d_model"},
      {"model.d_model", "attn.qkv.weight", {3, m.d_model, m.d_model}, "3 * model.d_model^2"},
      {"model.ffn", "ffn.fc1.weight", {ffn_width, m.d_model}, "ffn width * model.d_model"},
      {"model.batch", "the tokens", {m.batch, m.seq_len + 1}, "model.batch * (model.seq_len + 1)"},
      {"model.batch", "the activations", {m.batch, m.seq_len, m.d_model}, "model.batch * model.seq_len * model.d_model"},
      {"model.batch", "the FFN activations", {m.batch, m.seq_len, ffn_width}, "model.batch * model.seq_len * ffn width"},
      {"model.batch", "the logits", {m.batch, m.seq_len, m.vocab}, "model.batch * model.seq_len * model.vocab"},
      {"model.batch", "the activations of all layers", {m.layers, m.batch, m.seq_len, ffn_width},
       "model.layers * model.batch * model.seq_len * ffn width"},
  };
  for (const Product& product : products) {
    std::int64_t total = 1;
    for (std::int64_t factor : product.factors) {
      if (!multiply(total, factor, total)) {
        reject(product.key, std::string(product.formula) + " (" + product.what + ") overflows a 64-bit integer");
      }
    }
  }
  // The parameter count: wte, wpe, per layer (2 LN + qkv + proj + 2 LN + fc1 + fc2), ln_f.
  const std::int64_t d = m.d_model, f = ffn_width;
  std::int64_t per_layer = 0, total = 0, term = 0;
  bool ok = multiply(d, d, term) && multiply(term, 4, per_layer) &&  // qkv (3 D^2) + proj (D^2)
            multiply(f, d, term) && multiply(term, 2, term) && add(per_layer, term, per_layer) &&  // fc1 + fc2
            add(per_layer, 9 * d + f, per_layer) &&  // biases and LayerNorms (d < 2^61 here)
            multiply(per_layer, m.layers, total) && multiply(m.vocab, d, term) && add(total, term, total) &&
            multiply(m.seq_len, d, term) && add(total, term, total) && add(total, 2 * d, total);
  if (!ok) reject("model.layers", "the parameter count overflows a 64-bit integer");
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

namespace {

// Enumerations and finite numbers (already checked for parsed decks; not for
// a Config built in code).
void check_enums_and_reals(const Config& c) {
  Config& values = const_cast<Config&>(c);  // read only: the table hands out references
  for (const Field& field : config_fields::fields()) {
    if (const auto* e = std::get_if<config_fields::EnumRef>(&field.ref)) {
      if (e->get(values) >= e->names().size())
        reject(field.name(), "expected one of " + join(e->names()) + ", got the value " + std::to_string(e->get(values)));
    } else if (const auto* real = std::get_if<config_fields::RealRef>(&field.ref)) {
      const double value = (*real)(values);
      if (!std::isfinite(value)) reject(field.name(), "must be a finite number, got " + number_text(value));
    }
  }
}

// Sizes and counts.
void check_sizes_and_counts(const Config& c) {
  const ModelConfig& m = c.model;
  require_at_least("model.vocab", m.vocab, 1);
  require_at_least("model.d_model", m.d_model, 1);
  require_at_least("model.heads", m.heads, 1);
  require_at_least("model.kv_heads", m.kv_heads, 0, " (0 means model.heads)");
  require_at_least("model.ffn", m.ffn, 0, " (0 means 4 * model.d_model)");
  require_at_least("model.layers", m.layers, 1);
  require_at_least("model.seq_len", m.seq_len, 1);
  require_at_least("model.window", m.window, 0, " (0 means full attention)");
  require_at_least("model.batch", m.batch, 1);
  require_at_least("parallel.dp", c.parallel.dp, 1);
  require_at_least("parallel.tp", c.parallel.tp, 1);
  require_at_least("parallel.pp", c.parallel.pp, 1);
  require_at_least("train.micro_batches", c.train.micro_batches, 1);
  require_at_least("parallel.ulysses_degree", c.parallel.ulysses_degree, 1);
  if (c.run.mode == RunMode::predict) {
    require_at_least("train.steps", c.train.steps, 0);
  } else {
    require_at_least("train.steps", c.train.steps, 1, std::string(" for run.mode ") + to_string(c.run.mode));
  }
  require_at_least("run.log_every", c.run.log_every, 1);
  require_at_least("kernels.chunk", c.kernels.chunk, 0, " (0 chooses per backend)");
  require_at_least("kernels.query_block", c.kernels.query_block, 0, " (0 chooses per backend)");
  require_at_least("kernels.key_block", c.kernels.key_block, 0, " (0 chooses per backend)");
  require_at_least("io.snapshot_step", c.io.snapshot_step, 0);
  require_at_least("io.checkpoint_every", c.io.checkpoint_every, 0, " (0 means no periodic checkpoints)");
  check_sizes(m);

  if (m.d_model % m.heads != 0) {
    reject("model.heads", "must divide model.d_model (" + std::to_string(m.d_model) + " % " + std::to_string(m.heads) +
                              " != 0)");
  }
  if (m.heads % m.kv_head_count() != 0) {
    reject("model.kv_heads", "must divide model.heads (" + std::to_string(m.heads) + " % " +
                                 std::to_string(m.kv_heads) + " != 0): each K/V head serves a group of query heads");
  }
  if (m.positions == PositionEncoding::rope && m.head_dim() % 2 != 0)
    reject("model.positions", "rope rotates pairs of a head's values: the head width model.d_model / model.heads = " +
                                  std::to_string(m.head_dim()) + " must be even");
  if (!(m.rope_theta > 1.0))
    reject("model.rope_theta", "must be > 1 (RoPE's frequencies are its negative powers), got " +
                                   number_text(m.rope_theta));
}

// Tensor parallelism splits heads and FFN units over parallel.tp ranks.
void check_tensor_parallel(const ModelConfig& m, const ParallelConfig& p) {
  if (m.heads % p.tp != 0) {
    reject("parallel.tp", "must divide model.heads (" + std::to_string(m.heads) + " % " + std::to_string(p.tp) +
                              " != 0): each TP rank owns whole heads");
  }
  if (m.kv_head_count() % p.tp != 0) {
    reject("parallel.tp", "must divide model.kv_heads (" + std::to_string(m.kv_head_count()) + " % " +
                              std::to_string(p.tp) + " != 0): each TP rank owns whole K/V heads");
  }
  if (m.ffn_width() % p.tp != 0) {
    reject("parallel.tp", "must divide the FFN width model.ffn (" + std::to_string(m.ffn_width()) + " % " +
                              std::to_string(p.tp) + " != 0)");
  }
}

// Training, memory and the performance model's keys (run.machine itself is
// checked by the predict and calibrate modes, before any work; the list only
// matters to predict).
void check_training(const Config& c) {
  const TrainConfig& t = c.train;
  if (!(t.lr > 0.0)) reject("train.lr", "must be > 0, got " + number_text(t.lr));
  if (t.weight_decay < 0.0) reject("train.weight_decay", "must be >= 0, got " + number_text(t.weight_decay));
  if (t.grad_clip < 0.0) reject("train.grad_clip", "must be >= 0 (0 disables clipping), got " + number_text(t.grad_clip));
  if (t.beta1 < 0.0 || t.beta1 >= 1.0) reject("train.beta1", "must be in [0, 1), got " + number_text(t.beta1));
  if (t.beta2 < 0.0 || t.beta2 >= 1.0) reject("train.beta2", "must be in [0, 1), got " + number_text(t.beta2));
  if (!(t.eps > 0.0)) reject("train.eps", "must be > 0, got " + number_text(t.eps));
  if (c.run.memory_per_rank_gib < 0.0)
    reject("run.memory_per_rank_gib", "must be >= 0 (0 means the node's available memory shared by its ranks), got " +
                                          number_text(c.run.memory_per_rank_gib));

  if (c.run.mode == RunMode::calibrate && c.model.precision == Precision::bf16)
    reject("model.precision", "run.mode calibrate measures fp32 or fp64 kernels; bf16 runs are predicted from them");
  if (c.model.precision == Precision::bf16 && c.kernels.attention == AttentionKernel::fused)
    reject("kernels.attention", "the fused kernel has no bf16 version; use gemm (or auto, which picks it for bf16)");
  if (c.model.precision != Precision::bf16 && c.kernels.attention == AttentionKernel::tensor_core)
    reject("kernels.attention", "the tensor_core kernel computes bf16 only; set model.precision bf16 or use auto");
  require_at_least("run.predict_max_ranks", c.run.predict_max_ranks, 1);
  if (c.run.predict_max_ranks > (std::int64_t{1} << 30))
    reject("run.predict_max_ranks", "must be <= 2^30, got " + std::to_string(c.run.predict_max_ranks));
  if (c.run.mode == RunMode::predict) parse_predict_seq_lens(c.run.predict_seq_lens);
}

// Ulysses' all-to-all carries a TP rank's K/V heads split or replicated
// (all_to_all_carries_kv_heads).
void check_ulysses_kv_heads(const ModelConfig& m, const ParallelConfig& p, std::int64_t degree,
                            const std::string& degree_text) {
  const std::int64_t kv = m.kv_head_count() / p.tp;
  if (all_to_all_carries_kv_heads(kv, degree)) return;
  reject("model.kv_heads", "model.kv_heads / parallel.tp = " + std::to_string(kv) +
                               " must divide or be divisible by "
                               "the Ulysses degree for parallel.strategy " +
                               std::string(to_string(p.strategy)) + " (" + degree_text + ")");
}

// The process grid: world = dp x pp x tp x sp; the first three and the batch.
void check_grid_divides(const Config& c, std::int64_t world) {
  const ModelConfig& m = c.model;
  const ParallelConfig& p = c.parallel;
  if (world % p.dp != 0) {
    reject("parallel.dp", "must divide the number of MPI ranks (" + std::to_string(world) + " % " +
                              std::to_string(p.dp) + " != 0)");
  }
  if ((world / p.dp) % p.tp != 0) {
    reject("parallel.tp", "must divide the ranks of each DP group (" + std::to_string(world) + " ranks / parallel.dp " +
                              std::to_string(p.dp) + " = " + std::to_string(world / p.dp) + ", not divisible by " +
                              std::to_string(p.tp) + ")");
  }
  if ((world / (p.dp * p.tp)) % p.pp != 0) {
    reject("parallel.pp", "must divide the ranks of each DP group over parallel.tp (" + std::to_string(world) +
                              " ranks / (parallel.dp " + std::to_string(p.dp) + " x parallel.tp " +
                              std::to_string(p.tp) + ") = " + std::to_string(world / (p.dp * p.tp)) +
                              ", not divisible by " + std::to_string(p.pp) + ")");
  }
  if (p.pp > m.layers) {
    reject("parallel.pp", "must be <= model.layers (" + std::to_string(p.pp) + " stages > " +
                              std::to_string(m.layers) + " layers): each stage holds at least one layer");
  }
  if (m.batch % p.dp != 0) {
    reject("model.batch", "must be divisible by parallel.dp (" + std::to_string(m.batch) + " % " +
                              std::to_string(p.dp) + " != 0)");
  }
  if ((m.batch / p.dp) % c.train.micro_batches != 0) {
    reject("train.micro_batches", "must divide the samples of each DP group, model.batch / parallel.dp (" +
                                      std::to_string(m.batch / p.dp) + " % " +
                                      std::to_string(c.train.micro_batches) + " != 0)");
  }
  check_tensor_parallel(m, p);
}

// The sequence split over sp = world / (dp pp tp) ranks: layout, rows, heads.
void check_sequence_split(const Config& c, std::int64_t world) {
  const ModelConfig& m = c.model;
  const ParallelConfig& p = c.parallel;
  const std::int64_t sp = sp_size(p, world);
  const std::int64_t micro_batch = m.batch / p.dp / c.train.micro_batches;
  const std::string sp_text = "sp = " + std::to_string(world) + " ranks / (parallel.dp " + std::to_string(p.dp) +
                              " x parallel.pp " + std::to_string(p.pp) + " x parallel.tp " + std::to_string(p.tp) +
                              ") = " + std::to_string(sp);
  if (p.strategy == Strategy::local && sp != 1) {
    reject("parallel.strategy", "'local' does not split the sequence, so it needs sp == 1, but " + sp_text +
                                    " (use parallel.dp x parallel.pp x parallel.tp = " + std::to_string(world) +
                                    " = world size, or a sequence-parallel strategy)");
  }
  // The layout splits the sequence for 'local' too (zigzag: 2 chunks on 1 rank).
  if (p.layout != Layout::zigzag && m.seq_len % sp != 0) {
    reject("model.seq_len", "must be divisible by sp for parallel.layout " + std::string(to_string(p.layout)) + " (" +
                                sp_text + "; " +
                                std::to_string(m.seq_len) + " % " + std::to_string(sp) + " != 0)");
  }
  if (p.layout == Layout::zigzag && m.seq_len % (2 * sp) != 0) {
    reject("model.seq_len", "must be divisible by 2 * sp for parallel.layout zigzag (" + sp_text + "; " +
                                std::to_string(m.seq_len) + " % " + std::to_string(2 * sp) + " != 0)");
  }
  // Megatron's sequence parallelism splits each TP group's rows over its tp ranks.
  const std::int64_t rows = micro_batch * (m.seq_len / sp);
  if (rows % p.tp != 0) {
    reject("parallel.tp", "must divide the rows of each TP group's micro-batch, model.batch / parallel.dp / "
                          "train.micro_batches x model.seq_len / sp (" +
                              std::to_string(rows) + " % " + std::to_string(p.tp) + " != 0; " + sp_text + ")");
  }
  const std::int64_t heads = m.heads / p.tp;  // per TP rank
  const std::string heads_text = p.tp > 1 ? "model.heads / parallel.tp = " + std::to_string(heads)
                                           : "model.heads = " + std::to_string(heads);
  if (p.strategy == Strategy::ulysses && heads % sp != 0) {
    reject("model.heads", "must be divisible by sp x parallel.tp for parallel.strategy ulysses (" + sp_text + "; " +
                              heads_text + ", not divisible by " + std::to_string(sp) + ")");
  }
  if (p.strategy == Strategy::ulysses) check_ulysses_kv_heads(m, p, sp, sp_text);
  if (p.strategy == Strategy::hybrid) {
    if (sp % p.ulysses_degree != 0) {
      reject("parallel.ulysses_degree", "must divide sp for parallel.strategy hybrid (" + sp_text + "; " +
                                            std::to_string(sp) + " % " + std::to_string(p.ulysses_degree) +
                                            " != 0)");
    }
    if (heads % p.ulysses_degree != 0) {
      reject("model.heads", "must be divisible by parallel.ulysses_degree x parallel.tp for parallel.strategy "
                            "hybrid (" + heads_text + ", not divisible by " + std::to_string(p.ulysses_degree) + ")");
    }
    check_ulysses_kv_heads(m, p, p.ulysses_degree, "parallel.ulysses_degree = " + std::to_string(p.ulysses_degree));
  }
#ifndef MINIATTN_HAVE_NCCL
  if (p.comm == CommBackend::nccl) reject("parallel.comm", "'nccl' needs a build with MINIATTN_ENABLE_NCCL=ON");
#endif
}

// Files and steps.
void check_files(const Config& c) {
  const TrainConfig& t = c.train;
  const IoConfig& io = c.io;
  if (io.init.empty()) {
    reject("io.init", "must be 'random' or the path of an HDF5 weights file, got an empty string");
  }
  if (!io.snapshot.empty() && c.run.mode != RunMode::predict && io.snapshot_step >= t.steps) {
    reject("io.snapshot_step", "must be in [0, train.steps) = [0, " + std::to_string(t.steps) + "), got " +
                                   std::to_string(io.snapshot_step));
  }
  if (io.checkpoint_every > 0 && io.checkpoint.empty()) {
    reject("io.checkpoint_every", "is " + std::to_string(io.checkpoint_every) +
                                      " but io.checkpoint is empty (give io.checkpoint a PATH.h5)");
  }
  if (!io.restart.empty() && !io.random_init()) {
    reject("io.init", "cannot be combined with io.restart (a checkpoint already holds the parameters)");
  }
}

void check_data(const Config& c) {
  if (c.data.task == DataTask::lookup && c.model.vocab < LookupTokens::kVocab)
    reject("data.task", "lookup needs model.vocab >= " + std::to_string(LookupTokens::kVocab) + " (" +
                            std::to_string(LookupTokens::kKeys) + " key tokens and one token per (key, value) pair); "
                            "model.vocab is " + std::to_string(c.model.vocab));
}

}  // namespace

std::int64_t sp_size(const ParallelConfig& parallel, std::int64_t world_size) {
  return world_size / (parallel.dp * parallel.tp * parallel.pp);
}

void validate_config(const Config& c, int world_size) {
  if (world_size < 1) throw std::invalid_argument("validate_config: world_size must be >= 1");
  check_enums_and_reals(c);
  check_sizes_and_counts(c);
  check_training(c);
  check_data(c);
  check_grid_divides(c, world_size);
  check_sequence_split(c, world_size);
  check_files(c);
}

std::vector<std::int64_t> parse_predict_seq_lens(const std::string& text) {
  std::vector<std::int64_t> values;
  std::stringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    std::int64_t value = 0;
    if (parse_integer_text(item, value) != NumberStatus::ok || value < 1 || value > (std::int64_t{1} << 31)) {
      reject("run.predict_seq_lens", "expected comma-separated integers in [1, 2^31] (e.g. \"65536,262144\"), got '" +
                                         text + "'");
    }
    values.push_back(value);
  }
  if (values.empty()) reject("run.predict_seq_lens", "expected at least one sequence length, got '" + text + "'");
  return values;
}

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

bool operator==(const Config& a, const Config& b) {
  if (a.deck_path != b.deck_path) return false;
  Config& left = const_cast<Config&>(a);  // read only
  Config& right = const_cast<Config&>(b);
  for (const Field& field : config_fields::fields()) {
    const bool equal = std::visit(Overloaded{[&](config_fields::EnumRef ref) { return ref.get(left) == ref.get(right); },
                                             [&](auto ref) { return ref(left) == ref(right); }},
                                  field.ref);
    if (!equal) return false;
  }
  return true;
}

bool operator!=(const Config& a, const Config& b) { return !(a == b); }

}  // namespace miniattn
