#pragma once
// Plans cuDNN fused-attention calls for one block: the local query rows
// (global positions q_pos) against one block of key rows (positions k_pos).
// cuDNN's SDPA masks a call only by a top-left diagonal band, so the planner
// cuts the block into rectangles where the project's position rules
// (AttentionMask::hides_position: causal, window) are exactly such a band,
// or hands the whole block to the gemm kernel when it cannot. Plain host
// code: no Kokkos, no cuDNN, no MPI, so that it can be tested exhaustively.
#include <vector>

#include "core/index.hpp"

namespace miniattn::kernels {

// The position rules of attention.hpp's AttentionMask (causal, window), without documents.
struct PositionRules {
  bool causal = false;
  index_t window = 0;
};

// One cuDNN call: block rows [query_offset, query_offset + query_count) against block key rows
// [key_offset, key_offset + key_count); inside, call-local (i, j) shown iff
// (!has_right_bound || j <= i + right_bound) && (!has_left_bound || j > i - left_bound).
// A bound is present only where it hides some pair of the rectangle.
struct CudnnCall {
  index_t query_offset = 0, query_count = 0, key_offset = 0, key_count = 0;
  bool has_right_bound = false;
  index_t right_bound = 0;  // >= 0: cuDNN refuses a negative one
  bool has_left_bound = false;
  index_t left_bound = 0;  // >= 1
  index_t sample = -1;     // -1: every sample of the block; else that sample alone (packed documents)
};

// Packed documents of a block (AttentionMask's documents): for each of
// `samples` samples the document of each query row and of each key row,
// row-major ([sample][row]); a query sees a key only where the ids are equal.
struct BlockDocuments {
  index_t samples = 0;
  std::vector<index_t> query, key;
};

// Whether call shows the pair of BLOCK rows (query_row, key_row) (false outside its rectangle).
bool call_shows(const CudnnCall& call, index_t query_row, index_t key_row);

// The calls of a block. Every pair the rules (and documents) show is shown
// by exactly one call (of its sample), no hidden pair by any; rectangles are
// disjoint and every query row of a call sees at least one of its keys
// (cuDNN's output for a row without keys is not to be relied on). No calls
// and no fallback: the block shows nothing.
//
// Which rows several calls share (cuDNN rounds each call's output and
// gradients to bf16 before they are summed in fp32, and where the parts
// cancel, as a row's dq over key subsets does, that costs accuracy): a block
// that is one band is one call; otherwise each maximal arithmetic
// progression of query positions (a run) is one call against all keys where
// that is a band, else one call per key run it sees, so a row is shared only
// between the key runs it sees. With the rows ordered as group_positions
// orders them (comm/process_grid.hpp), that happens only in hybrid blocks of
// striped positions between two groups (U key runs a row) and in windows
// that span the gap between a zigzag rank's two chunks. With packed
// documents each call is cut further, sample by sample, into one call per
// document it meets: the rows of one document against that document's keys
// (a call's keys increase, so a document is one stretch of them), a call of
// that sample alone; rows share calls only as their position calls did.
// Besides, a call of more than rows_per_call query rows is cut along its
// query rows (the deterministic backward keeps dS for every pair of a call):
// the pieces share the call's key rows and nothing else.
struct BlockPlan {
  std::vector<CudnnCall> calls;
  // true: the whole block goes to the gemm kernel (which applies the project's own mask) and calls
  // is empty: positions no layout of miniattn's makes, or a document whose keys are not one stretch.
  bool whole_block_fallback = false;
  // Calls that rows_per_call added: calls.size() less the calls of the same plan without the limit.
  index_t cut_calls = 0;
};

// documents: packed documents (null: none); the calls are then per sample.
// rows_per_call: the most query rows of a call (0: no limit).
// Work O(rows x runs x log rows), where runs are the maximal arithmetic progressions of the positions
// (a few per rank of a layout), and O(samples x (rows + documents x log rows)) more with documents;
// never O(n_q x n_k).
BlockPlan plan_block(const std::vector<index_t>& q_pos, const std::vector<index_t>& k_pos,
                     const PositionRules& rules, const BlockDocuments* documents = nullptr,
                     index_t rows_per_call = 0);

}  // namespace miniattn::kernels
