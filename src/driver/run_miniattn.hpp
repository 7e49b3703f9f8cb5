#pragma once
// The driver: the only place that knows every part (grid, data, model,
// attention strategy, optimizer, I/O, timers). Runs the deck's run.mode.
#include <mpi.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "core/config.hpp"

namespace miniattn {

// run.mode predict and calibrate: the performance model (perfmodel/, beside
// src/), which main hands in so that the mini-app does not depend on its model.
using ModelModes = std::function<nlohmann::json(const Config&, MPI_Comm)>;

// Returns the process exit status. Throws InputError for problems found before
// any work starts (the same on every rank).
int run_miniattn(const Config& config, MPI_Comm world, const ModelModes& model_modes);

}  // namespace miniattn
