#include "kernels/attention/cudnn/block_plan.hpp"

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace miniattn::kernels {
namespace {

// A layout makes a few runs per rank (zigzag two, striped one); a block with
// far more is no layout of miniattn's, and planning it pair by pair would
// approach the O(n_q x n_k) work the planner must avoid.
constexpr std::size_t kMaxRunPairs = 4096;

// Consecutive rows of a block: their positions and the block row of the first.
struct Rows {
  const index_t* positions = nullptr;
  index_t count = 0;
  index_t offset = 0;
};

// The local key rows [first, end) a query sees. With keys strictly increasing
// the rules (a position interval) keep an interval of rows.
struct KeyInterval {
  index_t first = 0, end = 0;
  bool empty() const { return end <= first; }
};

KeyInterval keys_seen(const Rows& keys, index_t query, const PositionRules& rules) {
  const index_t* begin = keys.positions;
  const index_t* end = begin + keys.count;
  const bool windowed = rules.window > 0;
  const index_t* first = windowed ? std::lower_bound(begin, end, query - rules.window + 1) : begin;
  const index_t* last = end;
  if (rules.causal)
    last = std::upper_bound(begin, end, query);
  else if (windowed)
    last = std::upper_bound(begin, end, query + rules.window - 1);
  return {first - begin, std::max(first, last) - begin};
}

bool strictly_increasing(const Rows& rows) {
  for (index_t i = 1; i < rows.count; ++i)
    if (rows.positions[i] <= rows.positions[i - 1]) return false;
  return true;
}

// The rectangle of a sub-block that holds every shown pair: the rows that see
// a key must be consecutive (a call's rows must each see one), and its keys
// span what those rows see.
struct Rectangle {
  index_t first_row = 0, rows = 0, first_key = 0, keys = 0;
};

// false when rows seeing keys are not consecutive; rows == 0 when none sees any.
bool shown_rectangle(const std::vector<KeyInterval>& seen, Rectangle& rect) {
  const auto sees = [](const KeyInterval& s) { return !s.empty(); };
  const auto first = std::find_if(seen.begin(), seen.end(), sees);
  if (first == seen.end()) return true;
  const auto last = std::find_if(seen.rbegin(), seen.rend(), sees).base();
  if (!std::all_of(first, last, sees)) return false;
  index_t key_first = first->first, key_end = first->end;
  for (auto s = first; s != last; ++s) {
    key_first = std::min(key_first, s->first);
    key_end = std::max(key_end, s->end);
  }
  rect = {first - seen.begin(), last - first, key_first, key_end - key_first};
  return true;
}

// The band's bounds, each read off the first row whose interval the
// rectangle's edge does not clip on that side (none: the bound is left out, as
// it would hide nothing), then required of every row: rows that disagree are
// not one band.
bool band_of(const std::vector<KeyInterval>& seen, const Rectangle& rect, CudnnCall& call) {
  const index_t last_key = rect.keys - 1;
  for (index_t i = 0; i < rect.rows; ++i) {
    const KeyInterval& s = seen[static_cast<std::size_t>(rect.first_row + i)];
    const index_t left = s.first - rect.first_key, right = s.end - 1 - rect.first_key;
    if (right < last_key && !call.has_right_bound) {
      call.has_right_bound = true;
      call.right_bound = right - i;
    }
    if (left > 0 && !call.has_left_bound) {
      call.has_left_bound = true;
      call.left_bound = i - left + 1;
    }
  }
  for (index_t i = 0; i < rect.rows; ++i) {
    const KeyInterval& s = seen[static_cast<std::size_t>(rect.first_row + i)];
    const index_t right = call.has_right_bound ? std::min(last_key, i + call.right_bound) : last_key;
    const index_t left = call.has_left_bound ? std::max<index_t>(0, i - call.left_bound + 1) : 0;
    if (s.first - rect.first_key != left || s.end - 1 - rect.first_key != right) return false;
  }
  // Implied by the rows agreeing (row 0 and the first key are seen), checked as cuDNN requires.
  return (!call.has_right_bound || call.right_bound >= 0) && (!call.has_left_bound || call.left_bound >= 1);
}

// Whether queries x keys (keys strictly increasing) is exactly one call or
// shows nothing; appends the call, in block rows, only when it is.
bool plan_as_one_call(const Rows& queries, const Rows& keys, const PositionRules& rules,
                      std::vector<CudnnCall>& calls) {
  std::vector<KeyInterval> seen(static_cast<std::size_t>(queries.count));
  for (index_t i = 0; i < queries.count; ++i)
    seen[static_cast<std::size_t>(i)] = keys_seen(keys, queries.positions[i], rules);
  Rectangle rect;
  if (!shown_rectangle(seen, rect)) return false;
  if (rect.rows == 0) return true;
  CudnnCall call;
  call.query_offset = queries.offset + rect.first_row;
  call.query_count = rect.rows;
  call.key_offset = keys.offset + rect.first_key;
  call.key_count = rect.keys;
  if (!band_of(seen, rect, call)) return false;
  calls.push_back(call);
  return true;
}

// The maximal strictly increasing arithmetic progressions of the rows: a
// contiguous chunk (stride 1), a striped share (stride P); a Ulysses group
// concatenates one or two per rank. Queries and keys of equal strides make a band.
std::vector<Rows> increasing_runs(const Rows& rows) {
  std::vector<Rows> runs;
  index_t start = 0;
  while (start < rows.count) {
    const index_t* p = rows.positions + start;
    index_t length = 1;
    if (start + 1 < rows.count && p[1] > p[0]) {
      const index_t stride = p[1] - p[0];
      length = 2;
      while (start + length < rows.count && p[length] - p[length - 1] == stride) ++length;
    }
    runs.push_back({p, length, rows.offset + start});
    start += length;
  }
  return runs;
}

// Each query run against each key run. (Each query run against all keys
// first gave no fewer calls for any block of miniattn's layouts: where runs
// meet, the band breaks at the gap between them.)
bool plan_by_runs(const Rows& queries, const Rows& keys, const PositionRules& rules,
                  std::vector<CudnnCall>& calls) {
  const std::vector<Rows> query_runs = increasing_runs(queries), key_runs = increasing_runs(keys);
  if (query_runs.size() * key_runs.size() > kMaxRunPairs) return false;
  for (const Rows& query_run : query_runs)
    for (const Rows& key_run : key_runs)
      if (!plan_as_one_call(query_run, key_run, rules, calls)) return false;
  return true;
}

// Rows [first, first + count) of a call as a call of their own: keys cut to
// what those rows see, bounds moved to the new corner and left out where they
// no longer hide anything.
CudnnCall call_rows(const CudnnCall& call, index_t first, index_t count) {
  const index_t last_key = call.key_count - 1;
  const index_t key_first = call.has_left_bound ? std::max<index_t>(0, first - call.left_bound + 1) : 0;
  const index_t key_last =
      call.has_right_bound ? std::min(last_key, first + count - 1 + call.right_bound) : last_key;
  CudnnCall part = call;
  part.query_offset = call.query_offset + first;
  part.query_count = count;
  part.key_offset = call.key_offset + key_first;
  part.key_count = key_last - key_first + 1;
  part.right_bound = call.right_bound + first - key_first;
  part.left_bound = call.left_bound - first + key_first;
  part.has_right_bound = call.has_right_bound && part.right_bound < part.key_count - 1;
  part.has_left_bound = call.has_left_bound && part.left_bound < part.query_count;
  return part;
}

// The call as pieces of call_rows of at most rows_per_call query rows (0: no
// limit), counted in plan.cut_calls. Besides, cuDNN refuses a sliding window
// (a left bound) over more queries than keys, so such a call goes as pieces
// of at most key_count rows, each of which sees at least as many keys as it
// has rows (a band of left bound >= 1 and right bound >= 0 widens as it goes
// down, and a piece no longer than the keys holds no more rows than the keys
// it sees).
void append_pieces(const CudnnCall& call, index_t rows_per_call, BlockPlan& plan) {
  const index_t cuDNN_takes = call.has_left_bound ? std::min(call.key_count, call.query_count) : call.query_count;
  const index_t rows = rows_per_call > 0 ? std::min(rows_per_call, cuDNN_takes) : cuDNN_takes;
  const auto pieces = [&](index_t r) { return (call.query_count + r - 1) / r; };
  plan.cut_calls += pieces(rows) - pieces(cuDNN_takes);
  if (rows == call.query_count) {
    plan.calls.push_back(call);
    return;
  }
  for (index_t first = 0; first < call.query_count; first += rows)
    plan.calls.push_back(call_rows(call, first, std::min(rows, call.query_count - first)));
}

// Rows [first, first + count) of a block cut into maximal stretches of one
// document (ids: one sample's document of each row).
struct Stretch {
  index_t first = 0, count = 0, document = 0;
};

std::vector<Stretch> stretches(const index_t* ids, index_t first, index_t count) {
  std::vector<Stretch> found;
  for (index_t i = first; i < first + count;) {
    index_t end = i + 1;
    while (end < first + count && ids[end] == ids[i]) ++end;
    found.push_back({i, end - i, ids[i]});
    i = end;
  }
  return found;
}

// A call of the position plan cut, sample by sample, to the pairs of each
// document: each stretch of its query rows against the stretch of its keys
// of the same document, planned as one call of that sample (a rectangle of a
// band is a band). false when a document's keys are not one stretch.
bool append_document_calls(const CudnnCall& call, const Rows& queries, const Rows& keys, const PositionRules& rules,
                           const BlockDocuments& documents, std::vector<CudnnCall>& calls) {
  for (index_t b = 0; b < documents.samples; ++b) {
    const index_t* query_ids = documents.query.data() + b * queries.count;
    const index_t* key_ids = documents.key.data() + b * keys.count;
    std::unordered_map<index_t, Stretch> key_stretch;
    for (const Stretch& k : stretches(key_ids, call.key_offset, call.key_count))
      if (!key_stretch.emplace(k.document, k).second) return false;
    for (const Stretch& q : stretches(query_ids, call.query_offset, call.query_count)) {
      const auto k = key_stretch.find(q.document);
      if (k == key_stretch.end()) continue;
      const std::size_t before = calls.size();
      const Rows query_rows{queries.positions + q.first, q.count, q.first};
      const Rows key_rows{keys.positions + k->second.first, k->second.count, k->second.first};
      if (!plan_as_one_call(query_rows, key_rows, rules, calls)) return false;
      for (std::size_t c = before; c < calls.size(); ++c) calls[c].sample = b;
    }
  }
  return true;
}

void require_documents_of(const BlockDocuments& documents, std::size_t query_rows, std::size_t key_rows) {
  const auto samples = static_cast<std::size_t>(documents.samples);
  if (documents.samples < 0 || documents.query.size() != samples * query_rows ||
      documents.key.size() != samples * key_rows)
    throw std::invalid_argument("plan_block: the documents hold " + std::to_string(documents.query.size()) +
                                " query and " + std::to_string(documents.key.size()) + " key ids for " +
                                std::to_string(documents.samples) + " samples of " + std::to_string(query_rows) +
                                " x " + std::to_string(key_rows) + " rows");
}

}  // namespace

bool call_shows(const CudnnCall& call, index_t query_row, index_t key_row) {
  const index_t i = query_row - call.query_offset, j = key_row - call.key_offset;
  if (i < 0 || i >= call.query_count || j < 0 || j >= call.key_count) return false;
  return (!call.has_right_bound || j <= i + call.right_bound) && (!call.has_left_bound || j > i - call.left_bound);
}

BlockPlan plan_block(const std::vector<index_t>& q_pos, const std::vector<index_t>& k_pos,
                     const PositionRules& rules, const BlockDocuments* documents, index_t rows_per_call) {
  if (documents != nullptr) require_documents_of(*documents, q_pos.size(), k_pos.size());
  BlockPlan plan;
  const Rows queries{q_pos.data(), static_cast<index_t>(q_pos.size()), 0};
  const Rows keys{k_pos.data(), static_cast<index_t>(k_pos.size()), 0};
  std::vector<CudnnCall> calls;
  const bool one_call = strictly_increasing(keys) && plan_as_one_call(queries, keys, rules, calls);
  bool planned = one_call || plan_by_runs(queries, keys, rules, calls);
  if (planned && documents != nullptr) {
    std::vector<CudnnCall> position_calls;
    position_calls.swap(calls);
    for (const CudnnCall& call : position_calls)
      planned = planned && append_document_calls(call, queries, keys, rules, *documents, calls);
  }
  if (!planned) {
    plan.whole_block_fallback = true;
    return plan;
  }
  for (const CudnnCall& call : calls) append_pieces(call, rows_per_call, plan);
  return plan;
}

}  // namespace miniattn::kernels
