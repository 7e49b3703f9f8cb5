// The machine description of the performance model (performance_model.hpp):
// the machine file's keys, their bounds and comments, reading, checking and
// writing it.
#include "perfmodel/performance_model.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"

namespace miniattn {

// ---------------------------------------------------------------- machine files

namespace {

struct TextField {
  const char* key;
  MemberOf<MachineDescription, std::string> member;
  const char* comment;
};
const TextField kTextFields[] = {
    {"name", &MachineDescription::name, "a short name for tables"},
    {"description", &MachineDescription::description, "what the figures are and where they come from"},
    {"precision", &MachineDescription::precision,
     "the scalar type the rates are for (fp32 | fp64 | bf16); predict refuses a deck of another"},
    {"attention_kernel", &MachineDescription::attention_kernel,
     "the attention kernel the attention rates are for (fused | gemm | cudnn); predict plans its memory"},
};

// `unset`: >= 0, where 0 means "not given" and the key is left out of the file.
enum class Bound { positive, non_negative, unset, fraction, count };

// A number of the machine file; `member` is null for the one integer, ranks_per_node.
struct NumberField {
  const char* key;
  MemberOf<MachineDescription, double> member;
  bool required;
  Bound bound;
  const char* comment;
};
const NumberField kLinkFields[] = {
    {"memory_bytes_per_rank", &MachineDescription::memory_bytes_per_rank, true, Bound::positive,
     "bytes of memory one rank may use (device memory on GPUs)"},
    {"bandwidth_intra", &MachineDescription::bandwidth_intra, true, Bound::positive,
     "bytes/s one rank sends to a partner on the same node, all ranks exchanging"},
    {"bandwidth_inter", &MachineDescription::bandwidth_inter, true, Bound::positive,
     "bytes/s one rank sends to a partner on another node"},
    {"latency_intra", &MachineDescription::latency_intra, true, Bound::non_negative,
     "seconds per message between ranks of one node"},
    {"latency_inter", &MachineDescription::latency_inter, true, Bound::non_negative, "seconds per message between nodes"},
    {"ranks_per_node", nullptr, true, Bound::count, "ranks sharing a node; consecutive world ranks share a node"},
    {"overlap_efficiency", &MachineDescription::overlap_efficiency, false, Bound::fraction,
     "fraction (0..1) of a posted transfer that progresses during compute (default 1)"},
};
const char* const kAloneComment =
    "rates of one rank with the rest of its node idle (keys gemm_flops .. elementwise_bandwidth; default: the rates above)";

// The rates, then the link figures: every number of the file, in file order.
const std::vector<NumberField>& number_fields() {
  static const std::vector<NumberField> fields = [] {
    std::vector<NumberField> all;
    for (const RateField& r : kRateFields)
      all.push_back({r.key, r.member, r.required, r.required ? Bound::positive : Bound::unset, r.comment});
    all.insert(all.end(), std::begin(kLinkFields), std::end(kLinkFields));
    return all;
  }();
  return fields;
}

std::string format_number(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.6g", value);
  std::string text = buffer;
  // YAML 1.1 readers want a '.' in the mantissa of a float.
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  else if (text.find('.') == std::string::npos && text.find_first_of("eE") != std::string::npos)
    text.insert(text.find_first_of("eE"), ".0");
  return text;
}

double value_of(const MachineDescription& m, const NumberField& f) {
  return f.member ? m.*f.member : static_cast<double>(m.ranks_per_node);
}

std::string text_of(const MachineDescription& m, const NumberField& f) {
  return f.member ? format_number(m.*f.member) : std::to_string(m.ranks_per_node);
}

void check_bound(const std::string& where, const std::string& key, double value, Bound bound, const std::string& text) {
  const char* broken = nullptr;
  switch (bound) {
    case Bound::positive: broken = value > 0 ? nullptr : "must be > 0"; break;
    case Bound::non_negative:
    case Bound::unset: broken = value >= 0 ? nullptr : "must be >= 0"; break;
    case Bound::fraction: broken = value >= 0 && value <= 1 ? nullptr : "must be in [0, 1]"; break;
    case Bound::count: broken = value >= 1 ? nullptr : "must be >= 1"; break;
  }
  if (broken) throw InputError(where + ": " + key + ": " + broken + ", got " + text);
}

double number_of(const YAML::Node& node, const std::string& where, const std::string& key) {
  if (!node.IsScalar()) throw InputError(where + ": " + key + ": expected a number");
  const std::string text = node.Scalar();
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || *end != '\0' || !std::isfinite(value))
    throw InputError(where + ": " + key + ": expected a number, got '" + text + "'");
  return value;
}

// Throws unless every key of `map` is one of `known` (", "-separated in the message).
void check_keys(const YAML::Node& map, const std::vector<std::string>& known, const std::string& where,
                const std::string& prefix) {
  for (const auto& entry : map) {
    const std::string key = entry.first.Scalar();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    throw InputError(where + ": " + prefix + key + ": unknown key (known: " + list + ")");
  }
}

void parse_number(const YAML::Node& node, const NumberField& f, const std::string& where, MachineDescription& m) {
  if (!node) {
    if (f.required) throw InputError(where + ": " + f.key + ": missing (" + f.comment + ")");
    return;
  }
  const double value = number_of(node, where, f.key);
  if (f.member) {
    m.*f.member = value;
    return;
  }
  if (value != std::floor(value)) throw InputError(where + ": " + f.key + ": expected an integer, got " + format_number(value));
  m.ranks_per_node = static_cast<std::int64_t>(value);
}

}  // namespace

MachineDescription parse_machine_text(const std::string& yaml_text, const std::string& where) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw InputError(where + ": not valid YAML: " + e.msg);
  }
  if (!root.IsMap()) throw InputError(where + ": a machine file is a YAML mapping of keys");
  std::vector<std::string> keys, rate_keys;
  for (const TextField& f : kTextFields) keys.push_back(f.key);
  for (const NumberField& f : number_fields()) keys.push_back(f.key);
  keys.insert(keys.end(), {"alone", "calibration"});  // calibration: free-form notes of how the figures were measured
  check_keys(root, keys, where, "");
  MachineDescription m;
  for (const TextField& f : kTextFields) {
    if (root[f.key] && !root[f.key].IsScalar()) throw InputError(where + ": " + f.key + ": expected a string");
    if (root[f.key]) m.*f.member = root[f.key].Scalar();
  }
  for (const NumberField& f : number_fields()) parse_number(root[f.key], f, where, m);
  if (const YAML::Node alone = root["alone"]) {
    if (!alone.IsMap()) throw InputError(where + ": alone: expected a mapping of rates");
    for (const RateField& r : kRateFields) rate_keys.push_back(r.key);
    check_keys(alone, rate_keys, where, "alone.");
    for (const RateField& r : kRateFields)
      if (alone[r.key]) m.alone.*r.member = number_of(alone[r.key], where, std::string("alone.") + r.key);
  }
  validate_machine(m, where);
  return m;
}

void validate_machine(const MachineDescription& m, const std::string& where) {
  if (!m.precision.empty() && m.precision != "fp32" && m.precision != "fp64" && m.precision != "bf16")
    throw InputError(where + ": precision: expected fp32, fp64 or bf16, got '" + m.precision + "'");
  const std::vector<std::string>& kernels = enum_names<AttentionKernel>();
  if (!m.attention_kernel.empty() &&
      (m.attention_kernel == to_string(AttentionKernel::automatic) ||
       std::find(kernels.begin(), kernels.end(), m.attention_kernel) == kernels.end()))
    throw InputError(where + ": attention_kernel: expected fused, gemm or cudnn, got '" + m.attention_kernel + "'");
  for (const NumberField& f : number_fields()) check_bound(where, f.key, value_of(m, f), f.bound, text_of(m, f));
  for (const RateField& r : kRateFields)
    check_bound(where, std::string("alone.") + r.key, m.alone.*r.member, Bound::non_negative, format_number(m.alone.*r.member));
}

MachineDescription read_machine_file(const std::string& path, const std::string& key_name) {
  if (path.empty()) throw InputError(key_name + ": no machine file given");
  std::ifstream in(path);
  if (!in) throw InputError(key_name + ": cannot read the machine file " + path);
  std::stringstream text;
  text << in.rdbuf();
  return parse_machine_text(text.str(), key_name + ": " + path);
}

std::string machine_to_yaml(const MachineDescription& m, const std::string& header_comment, const std::string& extra) {
  std::ostringstream out, alone;
  std::istringstream header(header_comment);
  for (std::string line; std::getline(header, line);) out << "# " << line << "\n";
  for (const TextField& f : kTextFields)  // a JSON string is a double-quoted YAML scalar
    if (!(m.*f.member).empty()) out << "# " << f.comment << "\n" << f.key << ": " << nlohmann::json(m.*f.member).dump() << "\n";
  for (const NumberField& f : number_fields())
    if (f.bound != Bound::unset || value_of(m, f) > 0) out << "# " << f.comment << "\n" << f.key << ": " << text_of(m, f) << "\n";
  for (const RateField& r : kRateFields)
    if (m.alone.*r.member > 0) alone << "  " << r.key << ": " << format_number(m.alone.*r.member) << "\n";
  if (!alone.str().empty()) out << "# " << kAloneComment << "\nalone:\n" << alone.str();
  return out.str() + extra;
}

nlohmann::json machine_to_json(const MachineDescription& m) {
  nlohmann::json j = nlohmann::json::object();
  for (const TextField& f : kTextFields) j[f.key] = m.*f.member;
  for (const NumberField& f : number_fields()) j[f.key] = f.member ? nlohmann::json(m.*f.member) : nlohmann::json(m.ranks_per_node);
  for (const RateField& r : kRateFields) j["alone"][r.key] = m.alone.*r.member;
  j["attention_edge_flops_forward"] = m.attention_edge_forward_rate();
  j["attention_edge_flops_backward"] = m.attention_edge_backward_rate();
  j["rsa_flops_forward"] = m.rsa_forward_rate();
  j["rsa_flops_backward"] = m.rsa_backward_rate();
  return j;
}

MachineDescription MachineDescription::shared_by(std::int64_t active) const {
  MachineDescription m = *this;
  const double share = static_cast<double>(ranks_per_node) / static_cast<double>(std::max<std::int64_t>(1, active));
  for (const RateField& r : kRateFields) {
    const double busy = this->*r.member, alone_rate = alone.*r.member;
    if (busy > 0) m.*r.member = std::min(alone_rate > 0 ? alone_rate : busy, busy * share);  // unset stays unset
  }
  return m;
}

}  // namespace miniattn
