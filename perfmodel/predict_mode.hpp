#pragma once
// run.mode predict and run.mode calibrate: the performance model
// (perfmodel/performance_model.hpp) against a machine description.
//
// predict: reads run.machine and prints, for rank counts 1, 2, 4, ... up to
// run.predict_max_ranks and each of run.predict_seq_lens, every strategy's
// predicted step seconds and memory per rank (with the deck's parallel.tp where
// it divides the ranks, the deck's parallel.pp and train.micro_batches, plus
// pure tensor parallelism, "tensor_parallel") and the best choice (fastest
// that fits); the result JSON holds every prediction, each with its dp, pp,
// micro_batches, tp, sp and modelled pipeline bubble_fraction, plus
// `prediction_for_deck`: the deck's own strategy, dp, pp, tp and micro-batches
// on the ranks it runs on, with its per-stage micro-batch times.
// No Kokkos work and no communication: every rank checks the deck, rank 0
// computes and answers, in about a second for 64 ranks and 24 layers.
//
// calibrate: measures this machine (GEMM, attention and elementwise rates with
// the deck's model sizes and precision on every rank at once; MPI latency and
// bandwidth between ranks 0 and 1 and, when there is one, a rank on another
// node; how much of a posted transfer progresses during compute) and writes the
// machine description to run.machine (temporary file + rename).
#include <mpi.h>

#include <nlohmann/json.hpp>

#include "core/config.hpp"

namespace miniattn {

// Collective over `world` only in the sense that every rank computes the same
// answer; throws InputError for a missing or malformed machine file.
nlohmann::json run_predict(const Config& config, MPI_Comm world);

// Collective over `world`.
template <class T>
nlohmann::json run_calibrate(const Config& config, MPI_Comm world);

// run.mode predict, or calibrate in the deck's precision (fp32, fp64 or
// bf16): what src/main.cpp hands run_miniattn as its model modes.
nlohmann::json run_model_mode(const Config& config, MPI_Comm world);

}  // namespace miniattn
