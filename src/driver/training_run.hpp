#pragma once
// One training (or bench) run at scalar type T: builds this rank's share of
// the model and data (after checking that it fits), runs the steps, writes
// snapshots, and reports.
#include <mpi.h>

#include <nlohmann/json.hpp>

#include "core/config.hpp"

namespace miniattn {

template <class T>
nlohmann::json run_training(const Config& config, MPI_Comm world);

}  // namespace miniattn
