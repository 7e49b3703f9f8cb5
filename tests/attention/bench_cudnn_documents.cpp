// Packed documents on cuDNN, timed the ways the cudnn kernel could run them
// (prints only; not a test; a GPU with cuDNN). The cudnn kernel still sends a
// block with packed documents to the gemm kernel (docs/design.md 8): this is
// the measurement that decides how it should run them instead.
//
// Usage: bench_cudnn_documents [n] [Dh] [heads] [options]
//   n, Dh, heads   one sample of n positions (32768), head width (64), heads (4); causal
//   --documents=L,...   documents of L positions tiling n (512,4096,32768)
//   --random-mean=M     also documents of lengths drawn from [M/2, 3M/2) (4096; 0: none)
//   --reps=R            timed repeats after one warm-up; best of R (5)
//   --nondeterministic  cuDNN's non-deterministic backward (dQ summed with atomics)
//
// For each set of documents, six ways, each forward and forward+backward:
//   per-document   one dense causal call per document (the graphs miniattn runs
//                  today, a graph per document length: the warm-up builds them);
//   per-doc shared the same, its graphs built with dynamic shapes and one
//                  kernel cache (CudnnSdpa's shared_kernels): how much of a
//                  new length's graph build that saves shows in the first pass;
//   ragged-packed  one ragged call (cuDNN's THD form with its padding mask) on
//                  a packed [n, H, Dh] copy (the layout cuDNN's own THD tests
//                  use), the copies in and out timed with it;
//   ragged         the same on the [1, H, n, Dh] block in place (head stride
//                  n Dh): no copies, if cuDNN's kernels take those strides;
//   ... bucketed   either ragged call with the sequences padded with empty ones
//                  to a power of two and the graph's length rounded up to one,
//                  so that one graph would serve every step's documents of a
//                  bucket (if cuDNN takes empty sequences).
// Rates are in model FLOP (forward 4 Dh H per shown pair, backward 2.5x that)
// and beside the rate of one causal call over the whole block, the rate
// documents should come near (the goal: 0.9 of it). The other ways' outputs
// and gradients are compared with the per-document ones (relative RMS
// difference); "agrees" is below 1e-2, bf16 rounding being 4e-3. Exit 1 when
// one disagrees.
#include <Kokkos_Core.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "core/types.hpp"
#include "kernels/attention/cudnn/cudnn_graphs.hpp"
#include "perfmodel/kernel_timing.hpp"
#include "ragged_documents.hpp"
#include "relative_difference.hpp"

namespace {

using miniattn::bf16;
using miniattn::index_t;
using miniattn::View1;
using miniattn::View4;
using miniattn::bench::Document;
using miniattn::bench::relative_difference;
using miniattn::kernels::CudnnSdpa;

struct Options {
  index_t n = 32768, dh = 64, heads = 4;
  std::vector<index_t> lengths{512, 4096, 32768};
  index_t random_mean = 4096;
  int reps = 5;
  bool deterministic = true;
};

// What one way of running writes; q, k, v and dout are shared (AttentionOperands).
struct Outputs {
  View4<bf16> out, dq, dk, dv;
  View1<float> stats;
  Outputs(const miniattn::AttentionOperands<bf16>& x, index_t stats_values)
      : out("out", 1, x.heads, x.n, x.dh),
        dq("dq", 1, x.heads, x.n, x.dh),
        dk("dk", 1, x.heads, x.n, x.dh),
        dv("dv", 1, x.heads, x.n, x.dh),
        stats("stats", stats_values) {}
};

// cuDNN's workspace, grown to the largest graph's need.
class Workspace {
 public:
  void* at_least(std::size_t bytes) {
    if (bytes > bytes_.extent(0)) {
      bytes_ = View1<unsigned char>();
      bytes_ = View1<unsigned char>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "cudnn.workspace"), bytes);
    }
    return bytes_.data();
  }
  std::size_t bytes() const { return bytes_.extent(0); }

 private:
  View1<unsigned char> bytes_;
};

// One way of running the documents: its forward and its backward (after its forward).
struct Way {
  std::string name;
  std::function<void(Outputs&)> forward, backward;
};

// ---- per-document calls

miniattn::kernels::SdpaCallShape document_call(const miniattn::AttentionOperands<bf16>& x, index_t first,
                                               index_t count) {
  miniattn::kernels::SdpaCallShape s;
  s.batch = 1;
  s.heads = s.kv_heads = x.heads;
  s.head_dim = x.dh;
  s.query_rows = s.key_rows = x.n;
  s.call.query_offset = s.call.key_offset = first;
  s.call.query_count = s.call.key_count = count;
  s.call.has_right_bound = true;  // causal: right bound 0
  return s;
}

// Each document's stats [H, count] at a 16-byte aligned place of its own.
std::vector<index_t> stats_places(const std::vector<Document>& documents, index_t heads) {
  std::vector<index_t> places;
  index_t next = 0;
  for (const Document& d : documents) {
    places.push_back(next);
    next += (heads * d.count + 3) / 4 * 4;
  }
  places.push_back(next);
  return places;
}

Way per_document(CudnnSdpa& sdpa, Workspace& ws, miniattn::AttentionOperands<bf16>& x,
                 const std::vector<Document>& documents) {
  const std::vector<index_t> places = stats_places(documents, x.heads);
  Way way{"per-document", {}, {}};
  way.forward = [&sdpa, &ws, &x, documents, places](Outputs& o) {
    for (std::size_t e = 0; e < documents.size(); ++e) {
      const auto s = document_call(x, documents[e].first, documents[e].count);
      void* workspace = ws.at_least(sdpa.prepare(s, false));
      sdpa.forward(s, x.q.data(), x.k.data(), x.v.data(), o.out.data(), o.stats.data() + places[e], workspace);
    }
  };
  way.backward = [&sdpa, &ws, &x, documents, places](Outputs& o) {
    for (std::size_t e = 0; e < documents.size(); ++e) {
      const auto s = document_call(x, documents[e].first, documents[e].count);
      void* workspace = ws.at_least(sdpa.prepare(s, true));
      sdpa.backward(s, x.q.data(), x.k.data(), x.v.data(), o.out.data(), x.dout.data(), o.stats.data() + places[e],
                    o.dq.data(), o.dk.data(), o.dv.data(), workspace);
    }
  };
  return way;
}

// ---- one ragged call

// The ragged rows of `documents` on the device, for one set of strides.
struct DeviceRows {
  View1<std::int32_t> counts;
  View1<std::int64_t> offsets;
  index_t sequences = 0, longest = 0;
  miniattn::kernels::SdpaRaggedRows rows() const { return {counts.data(), counts.data(), offsets.data(), offsets.data()}; }
};

DeviceRows device_rows(const std::vector<Document>& documents, const miniattn::bench::BlockStrides& strides,
                       bool bucketed) {
  const miniattn::bench::RaggedRows host = miniattn::bench::ragged_rows(documents, strides, bucketed);
  DeviceRows rows{View1<std::int32_t>("counts", host.counts.size()), View1<std::int64_t>("offsets", host.offsets.size()),
                  static_cast<index_t>(host.counts.size()), host.longest};
  Kokkos::deep_copy(rows.counts, Kokkos::View<const std::int32_t*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(
                                     host.counts.data(), host.counts.size()));
  Kokkos::deep_copy(rows.offsets, Kokkos::View<const std::int64_t*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(
                                      host.offsets.data(), host.offsets.size()));
  return rows;
}

miniattn::kernels::SdpaRaggedShape ragged_shape(const miniattn::AttentionOperands<bf16>& x, const DeviceRows& rows,
                                                const miniattn::bench::BlockStrides& strides) {
  miniattn::kernels::SdpaRaggedShape s;
  s.sequences = rows.sequences;
  s.heads = s.kv_heads = x.heads;
  s.head_dim = x.dh;
  s.max_query_count = s.max_key_count = rows.longest;
  s.query_head_stride = s.key_head_stride = strides.head;
  s.query_row_stride = s.key_row_stride = strides.row;
  s.causal = true;
  return s;
}

// [1, H, n, Dh] <-> the packed [n, H, Dh] copy (ragged_documents.hpp's packed_strides).
void pack(const View4<bf16>& block, const View1<bf16>& packed) {
  const index_t heads = block.extent(1), n = block.extent(2), dh = block.extent(3);
  Kokkos::parallel_for(
      "bench::pack", Kokkos::MDRangePolicy<Kokkos::Rank<3>>({0, 0, 0}, {n, heads, dh}),
      KOKKOS_LAMBDA(index_t p, index_t h, index_t d) { packed((p * heads + h) * dh + d) = block(0, h, p, d); });
}
void unpack(const View1<bf16>& packed, const View4<bf16>& block) {
  const index_t heads = block.extent(1), n = block.extent(2), dh = block.extent(3);
  Kokkos::parallel_for(
      "bench::unpack", Kokkos::MDRangePolicy<Kokkos::Rank<3>>({0, 0, 0}, {n, heads, dh}),
      KOKKOS_LAMBDA(index_t p, index_t h, index_t d) { block(0, h, p, d) = packed((p * heads + h) * dh + d); });
}

// bucketed (ragged_documents.hpp): sequences and lengths rounded up to powers of two, empty sequences added.
Way ragged_in_place(CudnnSdpa& sdpa, Workspace& ws, miniattn::AttentionOperands<bf16>& x,
                    const std::vector<Document>& documents, bool bucketed) {
  const auto strides = miniattn::bench::in_place_strides(x.heads, x.n, x.dh);
  const DeviceRows rows = device_rows(documents, strides, bucketed);
  const auto s = ragged_shape(x, rows, strides);
  Way way{bucketed ? "ragged bucketed" : "ragged", {}, {}};
  way.forward = [&sdpa, &ws, &x, rows, s](Outputs& o) {
    sdpa.ragged_forward(s, rows.rows(), x.q.data(), x.k.data(), x.v.data(), o.out.data(), o.stats.data(),
                        ws.at_least(sdpa.prepare_ragged(s, false)));
  };
  way.backward = [&sdpa, &ws, &x, rows, s](Outputs& o) {
    sdpa.ragged_backward(s, rows.rows(), x.q.data(), x.k.data(), x.v.data(), o.out.data(), x.dout.data(),
                         o.stats.data(), o.dq.data(), o.dk.data(), o.dv.data(),
                         ws.at_least(sdpa.prepare_ragged(s, true)));
  };
  return way;
}

// The packed copies a ragged call on [n, H, Dh] needs: in, and its results out.
struct Packed {
  View1<bf16> q, k, v, out, dout, dq, dk, dv;
  explicit Packed(std::size_t values)
      : q("pq", values), k("pk", values), v("pv", values), out("pout", values), dout("pdout", values),
        dq("pdq", values), dk("pdk", values), dv("pdv", values) {}
};

Way ragged_packed(CudnnSdpa& sdpa, Workspace& ws, miniattn::AttentionOperands<bf16>& x,
                  const std::vector<Document>& documents, bool bucketed) {
  const auto strides = miniattn::bench::packed_strides(x.heads, x.n, x.dh);
  const DeviceRows rows = device_rows(documents, strides, bucketed);
  const auto s = ragged_shape(x, rows, strides);
  const Packed p(static_cast<std::size_t>(x.n * x.heads * x.dh));
  Way way{bucketed ? "packed bucketed" : "ragged-packed", {}, {}};
  way.forward = [&sdpa, &ws, &x, rows, s, p](Outputs& o) {
    pack(x.q, p.q);
    pack(x.k, p.k);
    pack(x.v, p.v);
    sdpa.ragged_forward(s, rows.rows(), p.q.data(), p.k.data(), p.v.data(), p.out.data(), o.stats.data(),
                        ws.at_least(sdpa.prepare_ragged(s, false)));
    unpack(p.out, o.out);
  };
  way.backward = [&sdpa, &ws, &x, rows, s, p](Outputs& o) {
    pack(x.dout, p.dout);
    sdpa.ragged_backward(s, rows.rows(), p.q.data(), p.k.data(), p.v.data(), p.out.data(), p.dout.data(),
                         o.stats.data(), p.dq.data(), p.dk.data(), p.dv.data(),
                         ws.at_least(sdpa.prepare_ragged(s, true)));
    unpack(p.dq, o.dq);
    unpack(p.dk, o.dk);
    unpack(p.dv, o.dv);
  };
  return way;
}

// ---- measuring

struct Timing {
  double first = 0, forward = 0, both = 0;  // seconds: the warm-up pass (graph builds), best forward, best fwd+bwd
};

Timing time_way(const Way& way, Outputs& o, int reps) {
  Timing t;
  t.first = miniattn::fenced_timings(0, 1, [&] { way.forward(o); way.backward(o); })[0];
  t.forward = miniattn::fenced_timings(0, reps, [&] { way.forward(o); })[0];
  t.both = miniattn::fenced_timings(0, reps, [&] { way.forward(o); way.backward(o); })[0];
  return t;
}

// Model FLOP of causal attention over the documents: forward 4 Dh H per shown pair.
double forward_flop(const std::vector<Document>& documents, const Options& o) {
  double pairs = 0;
  for (const Document& d : documents) pairs += 0.5 * static_cast<double>(d.count) * static_cast<double>(d.count + 1);
  return 4.0 * static_cast<double>(o.dh * o.heads) * pairs;
}

// TFLOP/s of one causal call over the whole block: forward, forward+backward.
struct Rates {
  double forward = 0, both = 0;
};

Rates rates(const Timing& t, double flop) { return {flop / t.forward / 1e12, 3.5 * flop / t.both / 1e12}; }

void print_row(const char* documents, const std::string& way, const Timing& t, double flop, const Rates& whole,
               std::size_t workspace, const std::string& agreement) {
  const double fwd = rates(t, flop).forward, both = rates(t, flop).both;
  std::printf("%-14s %-16s fwd %8.3f ms %6.1f TFLOP/s (%.2f)  fwd+bwd %8.3f ms %6.1f TFLOP/s (%.2f)  "
              "first pass %7.3f s  workspace %zu B  %s\n",
              documents, way.c_str(), 1e3 * t.forward, fwd, fwd / whole.forward, 1e3 * t.both, both, both / whole.both,
              t.first, workspace, agreement.c_str());
}

}  // namespace

namespace {

// The whole block as one causal call: the rates documents are judged against.
Rates whole_block_rates(CudnnSdpa& sdpa, miniattn::AttentionOperands<bf16>& x, const Options& o) {
  Workspace ws;
  const std::vector<Document> whole{{0, 0, x.n}};
  Outputs outputs(x, x.heads * x.n);
  const Timing t = time_way(per_document(sdpa, ws, x, whole), outputs, o.reps);
  const double flop = forward_flop(whole, o);
  print_row("whole block", "one call", t, flop, rates(t, flop), ws.bytes(), "");
  return rates(t, flop);
}

// The cuDNN objects the ways run on: graphs of their own, and graphs sharing kernels (CudnnSdpa's shared_kernels).
struct Sdpas {
  CudnnSdpa& own;
  CudnnSdpa& shared;
};

// One set of documents: the outputs and stats places of every way.
struct DocumentSet {
  std::string label;
  std::vector<Document> documents;
  double flop = 0;
  index_t stats_values = 0;  // per-document stats at their places, or a ragged call's [sequences, H, longest]
};

DocumentSet document_set(std::string label, std::vector<Document> documents, const Options& o) {
  index_t longest = 0;
  for (const Document& d : documents) longest = std::max(longest, d.count);
  const index_t places = stats_places(documents, o.heads).back();
  const index_t ragged = miniattn::bench::power_of_two_at_least(static_cast<index_t>(documents.size())) * o.heads *
                         miniattn::bench::power_of_two_at_least(longest);
  const double flop = forward_flop(documents, o);
  return {std::move(label), std::move(documents), flop, std::max(places, ragged)};
}

// A way timed and checked against the per-document outputs; false when it
// disagrees. A graph cuDNN refuses is printed as refused.
bool compare_way(const std::function<Way(Workspace&)>& make, const DocumentSet& set, const Outputs& reference,
                 miniattn::AttentionOperands<bf16>& x, const Rates& whole, const Options& o) {
  Workspace ws;
  Outputs outputs(x, set.stats_values);
  std::string name = "?";
  try {
    const Way way = make(ws);
    name = way.name;
    const Timing t = time_way(way, outputs, o.reps);
    const double worst =
        std::max({relative_difference(outputs.out, reference.out), relative_difference(outputs.dq, reference.dq),
                  relative_difference(outputs.dk, reference.dk), relative_difference(outputs.dv, reference.dv)});
    char agreement[96];
    std::snprintf(agreement, sizeof agreement, "%s per-document (worst relative RMS %.2e)",
                  worst < 1e-2 ? "agrees with" : "DIFFERS from", worst);
    print_row(set.label.c_str(), name, t, set.flop, whole, ws.bytes(), agreement);
    return worst < 1e-2;
  } catch (const std::exception& e) {
    std::printf("%-14s %-16s refused: %s\n", set.label.c_str(), name.c_str(), e.what());
    return true;
  }
}

// Every way on one set of documents; false when one disagrees with the per-document calls.
bool time_documents(const Sdpas& sdpa, miniattn::AttentionOperands<bf16>& x, const DocumentSet& set,
                    const Rates& whole, const Options& o) {
  Workspace ws;
  Outputs reference(x, set.stats_values);
  const int graphs_before = sdpa.own.graphs_built();
  const Timing t = time_way(per_document(sdpa.own, ws, x, set.documents), reference, o.reps);
  print_row(set.label.c_str(), "per-document", t, set.flop, whole, ws.bytes(),
            std::to_string(sdpa.own.graphs_built() - graphs_before) + " graphs");
  const std::function<Way(Workspace&)> ways[] = {
      [&](Workspace& w) {
        Way way = per_document(sdpa.shared, w, x, set.documents);
        way.name = "per-doc shared";
        return way;
      },
      // The packed layout first: it is the one cuDNN's own THD tests run, and
      // a fault in the other would leave the device unusable for it.
      [&](Workspace& w) { return ragged_packed(sdpa.own, w, x, set.documents, false); },
      [&](Workspace& w) { return ragged_packed(sdpa.own, w, x, set.documents, true); },
      [&](Workspace& w) { return ragged_in_place(sdpa.own, w, x, set.documents, false); },
      [&](Workspace& w) { return ragged_in_place(sdpa.own, w, x, set.documents, true); },
  };
  bool agree = true;
  for (const auto& make : ways) agree = compare_way(make, set, reference, x, whole, o) && agree;
  return agree;
}

Options parse(int argc, char** argv) {
  Options o;
  CLI::App app{"Packed documents on cuDNN: a call per document against one ragged call"};
  app.add_option("n", o.n, "positions of the one sample")->check(CLI::PositiveNumber);
  app.add_option("Dh", o.dh, "head width")->check(CLI::PositiveNumber);
  app.add_option("heads", o.heads, "heads")->check(CLI::PositiveNumber);
  app.add_option("--documents", o.lengths, "document lengths")->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--random-mean", o.random_mean, "mean of drawn document lengths (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--reps", o.reps, "timed repeats after one warm-up; best of them")->check(CLI::PositiveNumber);
  bool nondeterministic = false;
  app.add_flag("--nondeterministic", nondeterministic, "cuDNN's non-deterministic backward");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  o.deterministic = !nondeterministic;
  return o;
}

int run(const Options& o) {
#if defined(KOKKOS_ENABLE_CUDA)
  miniattn::AttentionOperands<bf16> x(o.heads, o.n, o.dh);
  CudnnSdpa sdpa(Kokkos::DefaultExecutionSpace().cuda_stream(), o.deterministic);
  std::printf("bench_cudnn_documents: n %lld, Dh %lld, H %lld, causal, bf16, cuDNN %ld, %s backward\n",
              static_cast<long long>(o.n), static_cast<long long>(o.dh), static_cast<long long>(o.heads),
              miniattn::kernels::cudnn_library_version(), o.deterministic ? "deterministic" : "non-deterministic");
  std::printf("(rates in model FLOP; in brackets, over the whole block's rate)\n");
  const Rates whole = whole_block_rates(sdpa, x, o);
  CudnnSdpa shared(Kokkos::DefaultExecutionSpace().cuda_stream(), o.deterministic, /*shared_kernels=*/true);
  const Sdpas both{sdpa, shared};
  std::vector<DocumentSet> sets;
  for (const index_t length : o.lengths)
    sets.push_back(document_set("docs " + std::to_string(length),
                                miniattn::bench::documents_of_length(1, o.n, length), o));
  if (o.random_mean > 0)
    sets.push_back(document_set("docs ~" + std::to_string(o.random_mean),
                                miniattn::bench::documents_of_random_length(1, o.n, o.random_mean), o));
  bool agree = true;
  for (const DocumentSet& set : sets) agree = time_documents(both, x, set, whole, o) && agree;
  std::printf("bench_cudnn_documents: the other ways %s the per-document calls\n", agree ? "agree with" : "DIFFER from");
  return agree ? 0 : 1;
#else
  (void)o;
  std::fprintf(stderr, "bench_cudnn_documents: needs a CUDA build with cuDNN\n");
  return 2;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  Kokkos::ScopeGuard kokkos(argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cudnn_documents: %s\n", e.what());
    return 1;
  }
}
