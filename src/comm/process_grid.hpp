#pragma once
// The process grid: world = DP x PP x SP x TP, TP innermost (Llama 3's order:
// the most frequent exchanges between the nearest ranks). The TP ranks of a
// group (consecutive world ranks: their all-gathers and reduce-scatters run
// every layer, so they stay inside a node) split heads and FFN units, and the
// rows of the sequence-parallel regions (Megatron sequence parallelism). Ranks
// of one SP group (same DP and TP index) split a sequence; DP groups work on
// different samples of the global batch. An SP group is itself Ulysses x
// Ring: consecutive groups of U = ulysses_degree SP ranks exchange heads by
// all-to-all, and the G = SP / U groups form a ring. The PP stages of one
// (DP, SP, TP) index hold consecutive layers and pass activations forward and
// their gradients back; the whole SP x TP block of a stage sits between them.
#include <mpi.h>

#include <vector>

#include "core/deck_words.hpp"
#include "core/decomposition.hpp"
#include "core/types.hpp"

namespace miniattn {

struct Config;

struct ProcessGrid {
  MPI_Comm world = MPI_COMM_WORLD;
  MPI_Comm sp_comm = MPI_COMM_NULL;  // ranks sharing one sequence (same stage and TP shard)
  MPI_Comm dp_comm = MPI_COMM_NULL;  // ranks holding the same positions and shard of different samples
  MPI_Comm tp_comm = MPI_COMM_NULL;  // ranks sharing the rows of one sequence chunk, each with its shard
  MPI_Comm position_comm = MPI_COMM_NULL;  // ranks holding the same positions (DP x TP): wpe's replicas
  MPI_Comm shard_comm = MPI_COMM_NULL;     // ranks holding the same TP shard (DP x SP)
  MPI_Comm stage_comm = MPI_COMM_NULL;     // ranks holding the same layers (DP x SP x TP)
  MPI_Comm pp_comm = MPI_COMM_NULL;        // the stages of one (DP, SP, TP) index, in stage order
  // The same stages, for the activations' gradients. Interleaved with pp = 2,
  // each stage sends the other both activations and gradients, in an order
  // that differs between the two kinds; NCCL has no tags and MPI's are all
  // 0 here, so each kind keeps its own order on its own communicator.
  MPI_Comm pp_gradient_comm = MPI_COMM_NULL;
  // The first and the last stage of pp_comm, which both hold the tied wte
  // (its gradient is summed between them); MPI_COMM_NULL on the other stages and with pp = 1.
  MPI_Comm tied_embedding_comm = MPI_COMM_NULL;
  MPI_Comm ulysses_comm = MPI_COMM_NULL;  // U consecutive SP ranks (all-to-all)
  MPI_Comm ring_comm = MPI_COMM_NULL;     // the same Ulysses index in every group (ring)
  int world_rank = 0, world_size = 1;
  int sp_rank = 0, sp_size = 1;
  int dp_rank = 0, dp_size = 1;
  int tp_rank = 0, tp_size = 1;
  int pp_rank = 0, pp_size = 1;  // this rank's stage and the number of stages
  int ulysses_rank = 0, ulysses_size = 1;
  int ring_rank = 0, ring_size = 1;

  // world_size must be divisible by dp x pp x tp, and sp by ulysses_degree (validated with the deck).
  static ProcessGrid create(MPI_Comm world, int dp, int pp, int tp, int ulysses_degree);
  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == pp_size - 1; }
  void free();
};

// The run's decomposition: the deck's strategy, layout and micro-batches over the grid's sizes.
Decomposition decomposition_of(const Config& c, const ProcessGrid& grid);

// Which global sequence positions a rank of an SP group owns.
// contiguous: [r*n, (r+1)*n); zigzag: chunks r and 2P-1-r of 2P equal chunks;
// striped: r, r+P, r+2P, ... (token i on rank i mod P). Zigzag and striped
// balance causal attention work: every pair of ranks meets about half masked.
std::vector<index_t> owned_positions(index_t seq_len, int sp_size, int sp_rank, Layout layout);

// The rows of ring group `group` after a Ulysses all-to-all of degree `ulysses`: the positions of SP ranks
// group * ulysses .. group * ulysses + ulysses - 1 in position order (Transformer Engine's all-to-all), so
// that cuDNN computes a causal or windowed block in one band (a contiguous or zigzag group is one or two
// runs of consecutive positions). Hybrid with striped positions keeps one rank's rows after another's: in
// position order its rows would be runs of U consecutive positions, a cuDNN call for every pair of runs,
// where rank order makes U runs of stride P (U^2 calls a block; kernels/attention/cudnn/block_plan.hpp).
std::vector<index_t> group_positions(index_t seq_len, int sp_size, int ulysses, int group, Layout layout);

// Where the all-to-all puts each row it gathers: entry u * n + i is the index,
// among group_positions, of row i of the group's rank u (n = seq_len / sp_size).
std::vector<index_t> gathered_rows(index_t seq_len, int sp_size, int ulysses, int group, Layout layout);

}  // namespace miniattn
