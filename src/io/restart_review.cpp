// The restart review (see restart_review.hpp): one table, restart_keys, of
// the keys a restart compares, how the file holds each and whether a change is
// refused or taken with a warning; docs/design.md 4.8 lists it for users.
#include "io/restart_review.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "io/hdf5_file.hpp"

namespace miniattn::io {
namespace {

// How an attribute on "/" holds a key (write_config_attributes, write_checkpoint).
enum class Stored { integer, unsigned_integer, flag, real, text };

enum class RestartRule {
  refuse,  // it defines what the run computes: under another value the checkpoint is another run's
  warn,    // chosen on purpose between two legs of one run: taken, and said once
};

struct RestartKey {
  const char* key;        // the deck key, as messages name it
  const char* attribute;  // on "/"
  Stored stored;
  std::string (*deck)(const Config&);  // the deck's value as the file holds it, as text
  // Given both values: train.optimizer's answer depends on the direction of the change.
  RestartRule (*rule)(const std::string& held, const std::string& deck);
  // The parenthesis after both values: why it is refused, or what the run does now.
  std::string (*why)(const std::string& held, const std::string& deck);
  bool (*compared)(const Config&);  // nullptr: always; else only where the key means something
};

// The shortest text that reads back as the same double, whole numbers in full
// (10000, not 1e+04 or 10000.000000000000).
std::string real_text(double value) {
  char text[32];
  if (value == std::trunc(value) && std::fabs(value) < 1e15) {
    std::snprintf(text, sizeof text, "%.0f", value);
    return text;
  }
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}
std::string flag_text(bool value) { return value ? "true" : "false"; }

RestartRule refused(const std::string&, const std::string&) { return RestartRule::refuse; }
RestartRule warned(const std::string&, const std::string&) { return RestartRule::warn; }
// AdamW needs its moments and step count from the same run; a run that kept
// none (sgd) cannot give them, while any optimizer can drop them.
RestartRule optimizer_rule(const std::string& held, const std::string& deck) {
  const std::string adamw = to_string(OptimizerKind::adamw);
  return deck == adamw && held != adamw ? RestartRule::refuse : RestartRule::warn;
}

std::string definition_why(const std::string&, const std::string&) {
  return "a restart continues the run; start a new run with io.init to change the model's definition";
}
std::string seed_why(const std::string&, const std::string&) {
  return "a restart continues the run and its data stream; start a new run with io.init to change the seed";
}
std::string rope_theta_why(const std::string&, const std::string& deck) {
  return "continuing with " + deck + ": the rotary angles change from this step on, as in a context extension";
}
std::string batch_why(const std::string&, const std::string& deck) {
  return "continuing with " + deck + " samples per step";
}
std::string optimizer_why(const std::string& held, const std::string& deck) {
  if (optimizer_rule(held, deck) == RestartRule::refuse)
    return "the checkpoint holds no " + deck + " moments to continue from; start a new run with io.init to change "
           "the optimizer";
  return "continuing with " + deck + ", which keeps no state: the checkpoint's " + held +
         " moments are not read; the step count goes on";
}
std::string documents_why(const std::string&, const std::string& deck) {
  return deck == "true" ? "from this step on a sample packs several documents and attention stays within each"
                        : "from this step on a sample is one document";
}
std::string task_why(const std::string&, const std::string& deck) {
  return "the samples come from the " + deck + " task from this step on";
}
std::string precision_why(const std::string&, const std::string& deck) {
  return "continuing in " + deck + ": the stored parameters and moments are read as they are, and the step rounds "
         "as " + deck + " does from this step on";
}
std::string deterministic_why(const std::string&, const std::string& deck) {
  return deck == "true" ? "cuDNN's deterministic backward from this step on: repeats are bitwise equal again"
                        : "cuDNN's non-deterministic backward from this step on: repeats may differ in the last bits";
}
std::string moments_why(const std::string& held, const std::string& deck) {
  return "continuing with " + deck + ": the checkpoint's AdamW moments were accumulated with " + held;
}

bool uses_rope(const Config& c) { return c.model.positions == PositionEncoding::rope; }
bool uses_adamw(const Config& c) { return c.train.optimizer == OptimizerKind::adamw; }

// The one home of what a restart compares (docs/design.md 4.8 lists it). A key
// that is in no row is a free choice (lr, steps, ...) or does not change what
// is computed (strategy and rank layout: the same run within rounding).
// Precision and cuDNN's backward change only rounding too, but repeats: said.
const std::vector<RestartKey>& restart_keys() {
  using C = const Config&;
  static const std::vector<RestartKey> keys = {
      {"model.vocab", "vocab", Stored::integer, [](C c) { return std::to_string(c.model.vocab); }, refused,
       definition_why, nullptr},
      {"model.d_model", "d_model", Stored::integer, [](C c) { return std::to_string(c.model.d_model); }, refused,
       definition_why, nullptr},
      {"model.heads", "heads", Stored::integer, [](C c) { return std::to_string(c.model.heads); }, refused,
       definition_why, nullptr},
      {"model.kv_heads", "kv_heads", Stored::integer, [](C c) { return std::to_string(c.model.kv_head_count()); },
       refused, definition_why, nullptr},
      {"model.ffn", "ffn", Stored::integer, [](C c) { return std::to_string(c.model.ffn_width()); }, refused,
       definition_why, nullptr},
      {"model.layers", "layers", Stored::integer, [](C c) { return std::to_string(c.model.layers); }, refused,
       definition_why, nullptr},
      {"model.seq_len", "seq_len", Stored::integer, [](C c) { return std::to_string(c.model.seq_len); }, refused,
       definition_why, nullptr},
      {"model.causal", "causal", Stored::flag, [](C c) { return flag_text(c.model.causal); }, refused,
       definition_why, nullptr},
      {"model.window", "window", Stored::integer, [](C c) { return std::to_string(c.model.window); }, refused,
       definition_why, nullptr},
      {"model.positions", "positions", Stored::text, [](C c) { return std::string(to_string(c.model.positions)); },
       refused, definition_why, nullptr},
      {"train.seed", "seed", Stored::unsigned_integer, [](C c) { return std::to_string(c.train.seed); }, refused,
       seed_why, nullptr},
      {"model.rope_theta", "rope_theta", Stored::real, [](C c) { return real_text(c.model.rope_theta); }, warned,
       rope_theta_why, uses_rope},
      {"model.batch", "batch", Stored::integer, [](C c) { return std::to_string(c.model.batch); }, warned, batch_why,
       nullptr},
      {"train.optimizer", "optimizer", Stored::text,
       [](C c) { return std::string(to_string(c.train.optimizer)); }, optimizer_rule, optimizer_why, nullptr},
      {"data.documents", "documents", Stored::flag, [](C c) { return flag_text(c.data.documents); }, warned,
       documents_why, nullptr},
      {"data.task", "task", Stored::text, [](C c) { return std::string(to_string(c.data.task)); }, warned, task_why,
       nullptr},
      {"model.precision", "precision", Stored::text, [](C c) { return std::string(to_string(c.model.precision)); },
       warned, precision_why, nullptr},
      {"kernels.deterministic", "deterministic", Stored::flag, [](C c) { return flag_text(c.kernels.deterministic); },
       warned, deterministic_why, nullptr},
      {"train.beta1", "beta1", Stored::real, [](C c) { return real_text(c.train.beta1); }, warned, moments_why,
       uses_adamw},
      {"train.beta2", "beta2", Stored::real, [](C c) { return real_text(c.train.beta2); }, warned, moments_why,
       uses_adamw},
      {"train.eps", "eps", Stored::real, [](C c) { return real_text(c.train.eps); }, warned, moments_why, uses_adamw},
  };
  return keys;
}

// A key's value as the file holds it, as text (the attribute exists).
std::string held_text(const Hdf5File& file, const RestartKey& k) {
  switch (k.stored) {
    case Stored::integer: return std::to_string(file.get_int_attribute("/", k.attribute));
    case Stored::unsigned_integer:  // train.seed: its bit pattern as an int64
      return std::to_string(static_cast<std::uint64_t>(file.get_int_attribute("/", k.attribute)));
    case Stored::flag: return flag_text(file.get_int_attribute("/", k.attribute) != 0);
    case Stored::real: return real_text(file.get_double_attribute("/", k.attribute));
    case Stored::text: return file.get_string_attribute("/", k.attribute);
  }
  return {};
}

}  // namespace

// Collective (agreed attribute reads): the same on every rank.
HeldConfig read_held_config(const Hdf5File& file) {
  HeldConfig held;
  for (const RestartKey& k : restart_keys())
    if (file.has_attribute("/", k.attribute)) held[k.key] = held_text(file, k);
  // Before parameter_type, "precision" held the stored type (fp32 for a bf16 run): not model.precision.
  if (!file.has_attribute("/", kParameterTypeAttribute)) held.erase("model.precision");
  return held;
}

HeldConfig held_config_of(const Config& config) {
  HeldConfig held;
  for (const RestartKey& k : restart_keys()) held[k.key] = k.deck(config);
  return held;
}

RestartReview review_restart(const HeldConfig& held, const Config& deck, const std::string& path) {
  RestartReview review;
  std::string unchecked;
  for (const RestartKey& k : restart_keys()) {
    if (k.compared != nullptr && !k.compared(deck)) continue;
    const auto found = held.find(k.key);
    if (found == held.end()) {
      unchecked += (unchecked.empty() ? "" : ", ") + std::string(k.key);
      continue;
    }
    const std::string& was = found->second;
    const std::string says = k.deck(deck);
    if (was == says) continue;
    const std::string line = std::string(k.key) + ": checkpoint " + path + " holds " + was + ", the deck says " +
                             says + " (" + k.why(was, says) + ")";
    if (k.rule(was, says) == RestartRule::warn)
      review.warnings.push_back(line);
    else if (review.refusal.empty())
      review.refusal = line;
  }
  // Files written before an attribute existed: accepted, but not silently.
  if (!unchecked.empty())
    review.warnings.push_back("io.restart: " + path + " was written before checkpoints held " + unchecked +
                              ": a change of these keys could not be checked");
  return review;
}

}  // namespace miniattn::io
