#pragma once
// The driver: the only place that knows every part (grid, data, model,
// attention strategy, optimizer, I/O, timers). Runs the deck's run.mode.
#include <mpi.h>

#include "core/config.hpp"

namespace miniattn {

// Returns the process exit status. Throws InputError for problems found before
// any work starts (the same on every rank).
int run_miniattn(const Config& config, MPI_Comm world);

}  // namespace miniattn
