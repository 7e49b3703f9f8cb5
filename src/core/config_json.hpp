#pragma once
// The resolved configuration as JSON (for the result line and the HDF5
// attributes): {"model": {...}, "parallel": {...}, "train": {...}, "io": {...},
// "run": {...}, "kernels": {...}, "deck": "<path>"}, every deck key present with
// its value (enums as their names, precision as "fp32"/"fp64").
#include <nlohmann/json.hpp>

#include "core/config.hpp"

namespace miniattn {

nlohmann::json config_to_json(const Config& config);

}  // namespace miniattn
