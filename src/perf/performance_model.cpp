#include "perf/performance_model.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "perf/exchange_model.hpp"
#include "perf/flop_count.hpp"
#include "perf/memory_plan.hpp"

namespace miniattn {

// ---------------------------------------------------------------- machine files

namespace {

struct MachineKey {
  const char* key;
  bool required;
  const char* comment;
};

// Every key of a machine file, in the order they are written.
const std::vector<MachineKey>& machine_keys() {
  static const std::vector<MachineKey> keys = {
      {"name", false, "a short name for tables"},
      {"description", false, "what the figures are and where they come from"},
      {"precision", false, "the scalar type the rates are for (fp32 | fp64); predict refuses another"},
      {"gemm_flops", true, "FLOP/s of one rank's dense-layer GEMMs (2 FLOPs per multiply-add)"},
      {"attention_flops_forward", true, "FLOP/s of the blockwise attention forward on full tiles (4 n^2 D per head set)"},
      {"attention_flops_backward", true, "FLOP/s of the blockwise attention backward (counted as 2.5 x the forward FLOPs)"},
      {"rsa_flops_forward", false, "FLOP/s of RSA's score + softmax + apply kernels, 4 Dh per pair (default: attention_flops_forward)"},
      {"rsa_flops_backward", false, "FLOP/s of RSA's dense block backward, 10 Dh per pair (default: attention_flops_backward)"},
      {"elementwise_bandwidth", true, "bytes/s (read + written) of the elementwise kernels (LayerNorm, GELU, layouts)"},
      {"memory_bytes_per_rank", true, "bytes of memory one rank may use (device memory on GPUs)"},
      {"bandwidth_intra", true, "bytes/s one rank sends to a partner on the same node, all ranks exchanging"},
      {"bandwidth_inter", true, "bytes/s one rank sends to a partner on another node"},
      {"latency_intra", true, "seconds per message between ranks of one node"},
      {"latency_inter", true, "seconds per message between nodes"},
      {"ranks_per_node", true, "ranks sharing a node; consecutive world ranks share a node"},
      {"overlap_efficiency", false, "fraction (0..1) of a posted transfer that progresses during compute (default 1)"},
      {"alone", false, "rates of one rank with the rest of its node idle (keys gemm_flops .. elementwise_bandwidth; default: the rates above)"},
  };
  return keys;
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

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char ch : text) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out += ch;
  }
  return out + "\"";
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
  std::set<std::string> known;
  for (const MachineKey& k : machine_keys()) known.insert(k.key);
  known.insert("calibration");  // free-form notes of how the figures were measured
  for (const auto& entry : root) {
    const std::string key = entry.first.Scalar();
    if (!known.count(key)) {
      std::string list;
      for (const MachineKey& k : machine_keys()) list += std::string(list.empty() ? "" : ", ") + k.key;
      throw InputError(where + ": " + key + ": unknown key (known: " + list + ", calibration)");
    }
  }
  for (const MachineKey& k : machine_keys()) {
    if (k.required && !root[k.key]) throw InputError(where + ": " + k.key + ": missing (" + k.comment + ")");
  }
  MachineDescription m;
  auto text = [&](const char* key, std::string& out) {
    if (root[key]) {
      if (!root[key].IsScalar()) throw InputError(where + ": " + key + ": expected a string");
      out = root[key].Scalar();
    }
  };
  auto number = [&](const char* key, double& out) {
    if (root[key]) out = number_of(root[key], where, key);
  };
  text("name", m.name);
  text("description", m.description);
  text("precision", m.precision);
  number("gemm_flops", m.gemm_flops);
  number("attention_flops_forward", m.attention_flops_forward);
  number("attention_flops_backward", m.attention_flops_backward);
  number("rsa_flops_forward", m.rsa_flops_forward);
  number("rsa_flops_backward", m.rsa_flops_backward);
  number("elementwise_bandwidth", m.elementwise_bandwidth);
  number("memory_bytes_per_rank", m.memory_bytes_per_rank);
  number("bandwidth_intra", m.bandwidth_intra);
  number("bandwidth_inter", m.bandwidth_inter);
  number("latency_intra", m.latency_intra);
  number("latency_inter", m.latency_inter);
  number("overlap_efficiency", m.overlap_efficiency);
  if (const YAML::Node alone = root["alone"]) {
    if (!alone.IsMap()) throw InputError(where + ": alone: expected a mapping of rates");
    const std::vector<std::pair<const char*, double*>> rates = {
        {"gemm_flops", &m.alone.gemm_flops},
        {"attention_flops_forward", &m.alone.attention_flops_forward},
        {"attention_flops_backward", &m.alone.attention_flops_backward},
        {"rsa_flops_forward", &m.alone.rsa_flops_forward},
        {"rsa_flops_backward", &m.alone.rsa_flops_backward},
        {"elementwise_bandwidth", &m.alone.elementwise_bandwidth}};
    for (const auto& entry : alone) {
      const std::string key = entry.first.Scalar();
      auto it = std::find_if(rates.begin(), rates.end(), [&](const auto& r) { return key == r.first; });
      if (it == rates.end())
        throw InputError(where + ": alone." + key + ": unknown key (known: gemm_flops, attention_flops_forward, "
                         "attention_flops_backward, rsa_flops_forward, rsa_flops_backward, elementwise_bandwidth)");
      *it->second = number_of(entry.second, where, "alone." + key);
    }
  }
  double rpn = number_of(root["ranks_per_node"], where, "ranks_per_node");
  if (rpn != std::floor(rpn)) throw InputError(where + ": ranks_per_node: expected an integer, got " + format_number(rpn));
  m.ranks_per_node = static_cast<std::int64_t>(rpn);
  validate_machine(m, where);
  return m;
}

void validate_machine(const MachineDescription& m, const std::string& where) {
  auto positive = [&](const char* key, double value) {
    if (!(value > 0)) throw InputError(where + ": " + key + ": must be > 0, got " + format_number(value));
  };
  auto non_negative = [&](const char* key, double value) {
    if (!(value >= 0)) throw InputError(where + ": " + key + ": must be >= 0, got " + format_number(value));
  };
  if (!m.precision.empty() && m.precision != "fp32" && m.precision != "fp64")
    throw InputError(where + ": precision: expected fp32 or fp64, got '" + m.precision + "'");
  positive("gemm_flops", m.gemm_flops);
  positive("attention_flops_forward", m.attention_flops_forward);
  positive("attention_flops_backward", m.attention_flops_backward);
  non_negative("rsa_flops_forward", m.rsa_flops_forward);
  non_negative("rsa_flops_backward", m.rsa_flops_backward);
  positive("elementwise_bandwidth", m.elementwise_bandwidth);
  positive("memory_bytes_per_rank", m.memory_bytes_per_rank);
  positive("bandwidth_intra", m.bandwidth_intra);
  positive("bandwidth_inter", m.bandwidth_inter);
  non_negative("latency_intra", m.latency_intra);
  non_negative("latency_inter", m.latency_inter);
  if (m.ranks_per_node < 1)
    throw InputError(where + ": ranks_per_node: must be >= 1, got " + std::to_string(m.ranks_per_node));
  non_negative("alone.gemm_flops", m.alone.gemm_flops);
  non_negative("alone.attention_flops_forward", m.alone.attention_flops_forward);
  non_negative("alone.attention_flops_backward", m.alone.attention_flops_backward);
  non_negative("alone.rsa_flops_forward", m.alone.rsa_flops_forward);
  non_negative("alone.rsa_flops_backward", m.alone.rsa_flops_backward);
  non_negative("alone.elementwise_bandwidth", m.alone.elementwise_bandwidth);
  if (!(m.overlap_efficiency >= 0 && m.overlap_efficiency <= 1))
    throw InputError(where + ": overlap_efficiency: must be in [0, 1], got " + format_number(m.overlap_efficiency));
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
  std::ostringstream out;
  std::istringstream header(header_comment);
  for (std::string line; std::getline(header, line);) out << "# " << line << "\n";
  auto comment = [&](const char* key) {
    for (const MachineKey& k : machine_keys())
      if (std::string(k.key) == key) out << "# " << k.comment << "\n";
  };
  auto text = [&](const char* key, const std::string& value) {
    if (value.empty()) return;
    comment(key);
    out << key << ": " << quoted(value) << "\n";
  };
  auto number = [&](const char* key, double value) {
    comment(key);
    out << key << ": " << format_number(value) << "\n";
  };
  text("name", m.name);
  text("description", m.description);
  text("precision", m.precision);
  number("gemm_flops", m.gemm_flops);
  number("attention_flops_forward", m.attention_flops_forward);
  number("attention_flops_backward", m.attention_flops_backward);
  if (m.rsa_flops_forward > 0) number("rsa_flops_forward", m.rsa_flops_forward);
  if (m.rsa_flops_backward > 0) number("rsa_flops_backward", m.rsa_flops_backward);
  number("elementwise_bandwidth", m.elementwise_bandwidth);
  number("memory_bytes_per_rank", m.memory_bytes_per_rank);
  number("bandwidth_intra", m.bandwidth_intra);
  number("bandwidth_inter", m.bandwidth_inter);
  number("latency_intra", m.latency_intra);
  number("latency_inter", m.latency_inter);
  comment("ranks_per_node");
  out << "ranks_per_node: " << m.ranks_per_node << "\n";
  number("overlap_efficiency", m.overlap_efficiency);
  const RankRates& a = m.alone;
  if (a.gemm_flops > 0 || a.attention_flops_forward > 0 || a.attention_flops_backward > 0 || a.rsa_flops_forward > 0 ||
      a.rsa_flops_backward > 0 || a.elementwise_bandwidth > 0) {
    comment("alone");
    out << "alone:\n";
    auto alone_number = [&](const char* key, double value) {
      if (value > 0) out << "  " << key << ": " << format_number(value) << "\n";
    };
    alone_number("gemm_flops", a.gemm_flops);
    alone_number("attention_flops_forward", a.attention_flops_forward);
    alone_number("attention_flops_backward", a.attention_flops_backward);
    alone_number("rsa_flops_forward", a.rsa_flops_forward);
    alone_number("rsa_flops_backward", a.rsa_flops_backward);
    alone_number("elementwise_bandwidth", a.elementwise_bandwidth);
  }
  out << extra;
  return out.str();
}

MachineDescription MachineDescription::shared_by(std::int64_t active) const {
  MachineDescription m = *this;
  const double share = static_cast<double>(ranks_per_node) / static_cast<double>(std::max<std::int64_t>(1, active));
  auto rate = [&](double busy, double alone_rate) {
    if (busy <= 0) return busy;  // RSA rates unset: stay unset
    return std::min(alone_rate > 0 ? alone_rate : busy, busy * share);
  };
  m.gemm_flops = rate(gemm_flops, alone.gemm_flops);
  m.attention_flops_forward = rate(attention_flops_forward, alone.attention_flops_forward);
  m.attention_flops_backward = rate(attention_flops_backward, alone.attention_flops_backward);
  m.rsa_flops_forward = rate(rsa_flops_forward, alone.rsa_flops_forward);
  m.rsa_flops_backward = rate(rsa_flops_backward, alone.rsa_flops_backward);
  m.elementwise_bandwidth = rate(elementwise_bandwidth, alone.elementwise_bandwidth);
  return m;
}

// ---------------------------------------------------------------- sizes

std::int64_t replicated_parameter_count(const ModelConfig& m) {
  const std::int64_t D = m.d_model, F = m.ffn_width();
  const std::int64_t per_layer = 4 * D * D + 2 * D * F + 9 * D + F;  // qkv, proj, fc1, fc2, biases, 2 LayerNorms
  return m.layers * per_layer + m.vocab * D + 2 * D;                 // + wte + ln_f
}

double causal_diagonal_fraction(std::int64_t chunk, std::int64_t query_block, std::int64_t key_block) {
  if (chunk <= 0) return 0.0;
  const std::int64_t qb = std::max<std::int64_t>(1, query_block), kb = std::max<std::int64_t>(1, key_block);
  // A tile pair is computed unless every key of the key tile lies after every
  // query of the query tile: key tile j (first key j kb) meets query tile i
  // (last query min((i+1) qb, c) - 1) iff j kb <= last query.
  double computed = 0.0;
  for (std::int64_t q0 = 0; q0 < chunk; q0 += qb) {
    const std::int64_t q1 = std::min(q0 + qb, chunk);
    const std::int64_t keys = std::min(chunk, ((q1 - 1) / kb + 1) * kb);
    computed += static_cast<double>(q1 - q0) * static_cast<double>(keys);
  }
  return computed / (static_cast<double>(chunk) * static_cast<double>(chunk));
}

// ---------------------------------------------------------------- decompositions

std::string step_config_problem(const StepConfig& c) {
  const ModelConfig& m = c.model;
  const std::string sp_text = " (sp = " + std::to_string(c.sp) + ")";
  if (c.dp < 1 || c.sp < 1) return "dp and sp must be >= 1";
  if (m.batch % c.dp != 0) return "model.batch " + std::to_string(m.batch) + " is not divisible by dp " + std::to_string(c.dp);
  if (c.strategy == Strategy::local) {
    if (c.sp != 1) return "local needs sp == 1" + sp_text;
    return "";
  }
  if (c.layout == Layout::zigzag && m.seq_len % (2 * c.sp) != 0) return "seq_len is not divisible by 2 sp" + sp_text;
  if (c.layout != Layout::zigzag && m.seq_len % c.sp != 0) return "seq_len is not divisible by sp" + sp_text;
  if (c.strategy == Strategy::ulysses && m.heads % c.sp != 0) return "heads " + std::to_string(m.heads) + " not divisible by sp" + sp_text;
  if (c.strategy == Strategy::hybrid) {
    if (c.ulysses < 1 || c.sp % c.ulysses != 0) return "ulysses degree does not divide sp" + sp_text;
    if (m.heads % c.ulysses != 0) return "heads not divisible by the ulysses degree " + std::to_string(c.ulysses);
  }
  return "";
}

namespace {

// Where the partners of each exchange sit (world ranks r share node r / rpn;
// SP groups are consecutive world ranks; Ulysses groups consecutive SP ranks).
struct Placement {
  bool ring_inter = false;       // some ring hop crosses nodes
  double ulysses_off_node = 0;   // worst rank: fraction of its Ulysses peers on other nodes
  bool world_inter = false;      // the world spans several nodes
  bool dp_inter = false;         // a DP group spans several nodes
  bool sp_inter = false;         // an SP group spans several nodes
};

bool range_spans_nodes(std::int64_t first, std::int64_t count, std::int64_t rpn) {
  return count > 1 && first / rpn != (first + count - 1) / rpn;
}

Placement place(const StepConfig& c, std::int64_t rpn) {
  Placement p;
  const std::int64_t world = c.world_size(), sp = c.sp, U = c.ulysses;
  p.world_inter = world > rpn;
  for (std::int64_t g = 0; g < c.dp && !p.sp_inter; ++g) p.sp_inter = range_spans_nodes(g * sp, sp, rpn);
  p.dp_inter = c.dp > 1 && (c.dp - 1) * sp >= rpn;  // members at stride sp
  p.ring_inter = (sp / U) > 1 && p.sp_inter;
  if (U > 1) {
    double worst = 0;
    for (std::int64_t start = 0; start < world; start += U) {
      if (!range_spans_nodes(start, U, rpn)) continue;
      // Members per node of [start, start + U): the smallest share has the most peers elsewhere.
      std::int64_t smallest = U;
      for (std::int64_t r = start; r < start + U;) {
        const std::int64_t node_end = (r / rpn + 1) * rpn;
        const std::int64_t here = std::min(node_end, start + U) - r;
        smallest = std::min(smallest, here);
        r += here;
      }
      worst = std::max(worst, static_cast<double>(U - smallest) / static_cast<double>(U - 1));
    }
    p.ulysses_off_node = worst;
  }
  return p;
}

double log2_ceil(double p) { return p <= 1 ? 0.0 : std::ceil(std::log2(p)); }

// Units of c x c blocks (per rank's head set) that one ring step computes on
// the slowest rank; `first` is step 0 (its own keys), `other` every later step.
struct RingWork {
  double chunk = 0;  // c
  double first = 0, other = 0;
};

RingWork ring_work(const StepConfig& c, bool tile_level) {
  const ModelConfig& m = c.model;
  const double U = c.ulysses;
  const bool zigzag = c.layout == Layout::zigzag && c.strategy != Strategy::local;
  RingWork w;
  const std::int64_t chunk = zigzag ? m.seq_len / (2 * c.sp) : m.seq_len / c.sp;
  w.chunk = static_cast<double>(chunk);
  // Diagonal chunk pair: tiles (blockwise kernel) or elements (RSA) on and below the diagonal.
  const double f = tile_level ? causal_diagonal_fraction(chunk, c.query_block, c.key_block)
                              : (static_cast<double>(chunk) + 1.0) / (2.0 * static_cast<double>(chunk));
  if (!m.causal) {
    const double k = zigzag ? 2 * U : U;
    w.first = w.other = k * k;
  } else if (zigzag) {
    // Low chunks [gU, gU+U) and their mirrors: against another group 2 U^2 full
    // pairs; against itself U^2 full + two triangles of U(U-1)/2 full and U diagonal.
    w.first = U * U + U * (U - 1) + 2 * U * f;
    w.other = 2 * U * U;
  } else {
    // Contiguous: the group's own U chunks form a triangle; at every later step
    // some group meets a group wholly before it (U^2 full pairs) and sets the pace.
    w.first = U * (U - 1) / 2 + U * f;
    w.other = U * U;
  }
  return w;
}

// Time of `bytes` in `messages` messages over a link.
double transfer_seconds(double bytes, double messages, double bandwidth, double latency) {
  return messages * latency + bytes / bandwidth;
}

double get(const std::map<std::string, double>& map, const std::string& key) {
  const auto it = map.find(key);
  return it == map.end() ? 0.0 : it->second;
}

}  // namespace

StepPrediction predict_step(const MachineDescription& node_machine, const StepConfig& c) {
  // The rates of a rank when min(world, ranks_per_node) ranks share its node.
  const MachineDescription machine =
      node_machine.shared_by(std::min<std::int64_t>(c.world_size(), node_machine.ranks_per_node));
  StepPrediction out;
  out.problem = step_config_problem(c);
  if (!out.problem.empty()) {
    out.valid = false;
    return out;
  }
  const ModelConfig& m = c.model;
  const double s = static_cast<double>(c.scalar_bytes());
  const double L = static_cast<double>(m.layers), D = static_cast<double>(m.d_model);
  const double H = static_cast<double>(m.heads), Dh = static_cast<double>(m.head_dim());
  const double F = static_cast<double>(m.ffn_width()), V = static_cast<double>(m.vocab);
  const double N = static_cast<double>(m.seq_len);
  const double b = static_cast<double>(m.batch / c.dp), n = N / c.sp;
  const double R = b * n;  // local rows
  const double U = c.ulysses, P = c.sp, G = static_cast<double>(c.sp / c.ulysses);
  const double world = c.world_size();
  const std::int64_t replicated = replicated_parameter_count(m);
  const double local_parameters = static_cast<double>(replicated) + n * D;
  const Placement where = place(c, machine.ranks_per_node);

  // --- compute
  const FlopCount all = training_step_flops(m);
  const AttentionFlops attention_all = attention_flops(m);
  const double dense_flops = (all.total() - attention_all.forward - attention_all.backward) / world;
  // The backward pass recomputes each block's QKV and fc1 projections
  // (src/model/transformer.cpp): work the model's FLOP count leaves out.
  const double recompute_flops = L * 2.0 * R * (3.0 * D * D + D * F);
  out.compute_parts["gemm"] = (dense_flops + recompute_flops) / machine.gemm_flops;

  // Elementwise bytes per step (read + written), kernel by kernel, in units of
  // R D, R F and R V scalars: forward block 29 RD + 3 RF (LayerNorms 2 x 3,
  // bias rows 3 + 1 + 1 RD + 1 RF, q/k/v split 6, head merge 2, two residual
  // copies 2 x 2 and adds 2 x 3, GELU 2 RF); backward block 26 RD + 4 RF (bias
  // gradients 1 + 1 + 3 RD + 1 RF, LayerNorms 2 x 5, head split 2 and qkv merge
  // 6, attention delta 2 + dq zero 1, GELU 3 RF) plus its recomputations
  // (LayerNorms 2 x 3, qkv and fc1 bias rows 3 RD + 1 RF, q/k/v split 6, head
  // merge 2); once: embedding 3 + 3, final LayerNorm 3 + 5 and its
  // recomputation 3, gradient zero 1 RD, cross-entropy 2 + 3 RV.
  double elementwise = L * (72 * R * D + 8 * R * F) + 18 * R * D + 5 * R * V;
  if (c.strategy == Strategy::ulysses || c.strategy == Strategy::hybrid) elementwise += L * 32 * R * D;  // pack + unpack, 8 tensors
  out.compute_parts["elementwise"] = elementwise * s / machine.elementwise_bandwidth;
  // Gradient zeroing, the norm's sum of squares and the update (AdamW: p, g, m, v read, p, m, v written).
  const double optimizer_passes = (c.optimizer == OptimizerKind::adamw ? 7.0 : 3.0) + 2.0;
  out.compute_parts["optimizer"] = optimizer_passes * local_parameters * s / machine.elementwise_bandwidth;

  // --- exchanges (bytes reused from the exchange model)
  ExchangeModelInput ex;
  ex.model = m;
  ex.strategy = c.strategy;
  ex.world_size = c.world_size();
  ex.dp = c.dp;
  ex.sp = c.sp;
  ex.ulysses = c.ulysses;
  ex.scalar_bytes = c.scalar_bytes();
  ex.replicated_parameters = replicated;
  ex.local_wpe_parameters = static_cast<std::int64_t>(n * D);
  out.exchange_bytes = modelled_exchange_bytes(ex);

  const double bw_ring = where.ring_inter ? machine.bandwidth_inter : machine.bandwidth_intra;
  const double lat_ring = where.ring_inter ? machine.latency_inter : machine.latency_intra;
  const double e = machine.overlap_efficiency;

  auto allreduce = [&](double bytes, double members, bool inter) {
    if (members <= 1) return 0.0;
    const double bw = inter ? machine.bandwidth_inter : machine.bandwidth_intra;
    const double lat = inter ? machine.latency_inter : machine.latency_intra;
    return 2.0 * (members - 1) / members * bytes / bw + 2.0 * log2_ceil(members) * lat;
  };
  if (world > 1) {
    out.exchange_parts["gradients.replicated"] = allreduce(get(out.exchange_bytes, "gradients.replicated"), world, where.world_inter);
    out.exchange_parts["loss"] = allreduce(8, world, where.world_inter);
  }
  if (c.dp > 1) out.exchange_parts["gradients.wpe"] = allreduce(get(out.exchange_bytes, "gradients.wpe"), c.dp, where.dp_inter);
  if (c.sp > 1) out.exchange_parts["grad_norm"] = allreduce(8, P, where.sp_inter);

  double hidden = 0.0, attention_forward = 0.0, attention_backward = 0.0;
  if (c.strategy == Strategy::rsa) {
    // Element-exact work (the dense kernels skip masked entries), per step on the slowest rank.
    StepConfig ring = c;
    ring.ulysses = 1;
    const RingWork w = ring_work(ring, false);
    const double per_block = b * H * w.chunk * w.chunk;  // pairs in one c x c block, all heads
    const double rate_f = machine.rsa_forward_rate(), rate_b = machine.rsa_backward_rate();
    const double X = b * n * D * s;
    const double t_one = transfer_seconds(X, 1, bw_ring, lat_ring), t_two = transfer_seconds(2 * X, 2, bw_ring, lat_ring);
    for (int step = 0; step < c.sp; ++step) {
      const double pairs = (step == 0 ? w.first : w.other) * per_block;
      const double half_f = pairs * 2 * Dh / rate_f;  // score (K pass) or apply (V pass)
      const double back = pairs * 10 * Dh / rate_b;
      attention_forward += 2 * half_f;
      attention_backward += back;
      if (step + 1 < c.sp) hidden += 2 * std::min(half_f, e * t_one) + std::min(back, e * t_two);
    }
    attention_forward *= L;
    attention_backward *= L;
    hidden *= L;
    const double steps = P - 1;
    if (P > 1) {
      out.exchange_parts["rsa.forward.k"] = L * steps * t_one;
      out.exchange_parts["rsa.forward.v"] = L * steps * t_one;
      out.exchange_parts["rsa.backward.kv"] = L * steps * t_two;
      out.exchange_parts["rsa.backward.dkdv"] = L * P * t_two;
    }
  } else {
    // Blockwise kernel, one ring of G ranks (G = 1: local attention), head set H / U.
    const RingWork w = ring_work(c, true);
    const double per_block_f = 4.0 * b * (H / U) * w.chunk * w.chunk * Dh;
    const double X = b * n * D * s;
    const double t_kv = transfer_seconds(2 * X, 2, bw_ring, lat_ring);
    for (int step = 0; step < static_cast<int>(G); ++step) {
      const double blocks = step == 0 ? w.first : w.other;
      const double fwd = blocks * per_block_f / machine.attention_flops_forward;
      const double bwd = blocks * 2.5 * per_block_f / machine.attention_flops_backward;
      attention_forward += fwd;
      attention_backward += bwd;
      if (step + 1 < G) hidden += std::min(fwd, e * t_kv) + std::min(bwd, e * t_kv);
    }
    attention_forward *= L;
    attention_backward *= L;
    hidden *= L;
    if (G > 1) {
      out.exchange_parts["ring.forward.kv"] = L * (G - 1) * t_kv;
      out.exchange_parts["ring.backward.kv"] = L * (G - 1) * t_kv;
      out.exchange_parts["ring.backward.dkdv"] = L * G * t_kv;
    }
    if (c.strategy == Strategy::ulysses || c.strategy == Strategy::hybrid) {
      // All-to-all over U consecutive ranks: the on-node and off-node shares travel side by side.
      const double off = where.ulysses_off_node;
      auto alltoall = [&](const std::string& label, double count_per_layer) {
        const double bytes = get(out.exchange_bytes, label);
        const double on_time = (1 - off) * bytes / machine.bandwidth_intra, off_time = off * bytes / machine.bandwidth_inter;
        const double latency = off > 0 ? machine.latency_inter : machine.latency_intra;
        out.exchange_parts[label] = std::max(on_time, off_time) + L * count_per_layer * (U - 1) * latency;
      };
      if (U > 1) {
        alltoall("ulysses.forward.qkv", 3);
        alltoall("ulysses.forward.out", 1);
        alltoall("ulysses.forward.lse", 1);
        alltoall("ulysses.backward.dout", 1);
        alltoall("ulysses.backward.dqkv", 3);
      }
    }
  }
  out.compute_parts["attention_forward"] = attention_forward;
  out.compute_parts["attention_backward"] = attention_backward;

  for (const auto& [name, seconds] : out.compute_parts) out.compute_seconds += seconds;
  for (const auto& [name, seconds] : out.exchange_parts) out.exchange_seconds += seconds;
  out.hidden_seconds = hidden;
  out.step_seconds = out.compute_seconds + out.exchange_seconds - out.hidden_seconds;
  out.tokens_per_second = out.step_seconds > 0 ? N * static_cast<double>(m.batch) / out.step_seconds : 0.0;

  // --- memory (the planner the run itself checks against)
  MemoryPlanInput plan_input;
  plan_input.model = m;
  plan_input.strategy = c.strategy;
  plan_input.optimizer = c.optimizer;
  plan_input.dp = c.dp;
  plan_input.sp = c.sp;
  plan_input.ulysses = c.ulysses;
  plan_input.scalar_bytes = c.scalar_bytes();
  plan_input.replicated_parameters = replicated;
  const MemoryPlan plan = plan_memory(plan_input);
  out.memory_parts = plan.parts;
  out.memory_bytes_per_rank = static_cast<double>(plan.total());
  out.fits = out.memory_bytes_per_rank <= machine.memory_bytes_per_rank;
  return out;
}

// ---------------------------------------------------------------- strategy comparison

std::vector<StrategyChoice> predict_strategies(const MachineDescription& machine, const StepConfig& deck, int ranks) {
  std::vector<StrategyChoice> choices;
  const std::int64_t batch = deck.model.batch;
  const int dp = (deck.dp > 1 && ranks % deck.dp == 0 && batch % deck.dp == 0) ? deck.dp : 1;
  const int sp = ranks / dp;
  for (const Strategy strategy : kPredictedStrategies) {
    StrategyChoice choice;
    StepConfig& c = choice.config;
    c = deck;
    c.strategy = strategy;
    c.dp = dp;
    c.sp = sp;
    c.ulysses = 1;
    if (strategy == Strategy::local) {
      c.dp = ranks;  // data parallelism only
      c.sp = 1;
    } else if (strategy == Strategy::ulysses) {
      c.ulysses = sp;
    } else if (strategy == Strategy::hybrid) {
      std::int64_t u = deck.ulysses;
      if (!(u > 1 && sp % u == 0 && deck.model.heads % u == 0)) {
        u = 1;  // the largest degree that divides sp and the heads and fits in a node
        for (std::int64_t cand = std::min<std::int64_t>(sp, machine.ranks_per_node); cand >= 1; --cand)
          if (sp % cand == 0 && deck.model.heads % cand == 0) {
            u = cand;
            break;
          }
      }
      c.ulysses = static_cast<int>(u);
    }
    choice.prediction = predict_step(machine, c);
    choices.push_back(choice);
  }
  return choices;
}

int best_strategy(const std::vector<StrategyChoice>& choices) {
  int best = -1;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const StepPrediction& p = choices[i].prediction;
    if (!p.valid || !p.fits) continue;
    if (best < 0 || p.step_seconds < choices[static_cast<std::size_t>(best)].prediction.step_seconds)
      best = static_cast<int>(i);
  }
  return best;
}

std::int64_t longest_fitting_seq_len(const MachineDescription& machine, StepConfig config) {
  const std::int64_t granule = 2 * std::max<std::int64_t>(config.sp, 1);
  const auto fits = [&](std::int64_t units) {
    config.model.seq_len = units * granule;
    const StepPrediction p = predict_step(machine, config);
    return p.valid && p.fits;
  };
  std::int64_t good = 0, bad = ((std::int64_t{1} << 31) / granule) + 1;  // fits(good) or good == 0; !fits(bad)
  if (fits(bad - 1)) return (bad - 1) * granule;
  while (bad - good > 1) {
    const std::int64_t mid = good + (bad - good) / 2;
    (fits(mid) ? good : bad) = mid;
  }
  return good * granule;
}

}  // namespace miniattn
