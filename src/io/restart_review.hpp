#pragma once
// The restart review: before read_checkpoint reads any dataset, the deck is
// compared with the run the checkpoint holds (docs/design.md 4.8). Apart from
// checkpoint.cpp because it is a question about the deck, not about the file's
// layout or checksums; checkpoint.hpp includes it (read_checkpoint throws
// RestartRefused and hands back the review's warnings).
#include <map>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"

namespace miniattn::io {

class Hdf5File;

// The checkpoint attribute that holds the stored float type of its datasets;
// a file without it holds that type in "precision" (and no model.precision).
constexpr const char* kParameterTypeAttribute = "parameter_type";

// A restart continues a run, so the deck must describe the run the checkpoint
// holds. The keys compared, and whether a change is refused or taken with a
// warning, are one table in restart_review.cpp (restart_keys; docs/design.md 4.8).
//
// The checkpoint's values of those keys, as the deck would write them
// ("model.positions" -> "learned"); a key whose attribute the file predates is
// absent.
using HeldConfig = std::map<std::string, std::string>;

// What a checkpoint written under `config` holds.
HeldConfig held_config_of(const Config& config);

struct RestartReview {
  // Empty, or the first refused change: "<key>: checkpoint <path> holds <held>,
  // the deck says <deck> (<why>)".
  std::string refusal;
  // One line per key changed on purpose, then at most one naming the keys the
  // file is too old to hold.
  std::vector<std::string> warnings;
};

// The deck against what the checkpoint at `path` holds. Pure: the same on
// every rank given the same values.
RestartReview review_restart(const HeldConfig& held, const Config& deck, const std::string& path);

// read_checkpoint's refusal of a deck that changes the run: an input error
// whose message begins with the deck key at fault (not with io.restart).
class RestartRefused : public InputError {
 public:
  using InputError::InputError;
};

// The values of the compared keys that the checkpoint `file` holds.
// Collective (agreed attribute reads): the same on every rank.
HeldConfig read_held_config(const Hdf5File& file);

}  // namespace miniattn::io
