// Rotary position embeddings (src/kernels/layers/rotary.hpp) against float64 loops
// written from the convention (rotate-half, inv_freq_i = theta^(-2i/Dh)):
// the table for global positions and for positions that restart at each
// packed document, the rotation of q/k rows, and its inverse as the
// transpose the backward pass needs.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/layers/rotary.hpp"

namespace {

using namespace miniattn;
using namespace miniattn::ktest;

constexpr double kTheta = 10000.0;

double expected_angle(index_t pos, index_t i, index_t dh) {
  return double(pos) * std::pow(kTheta, -double(2 * i) / double(dh));
}

// Positions as a zigzag rank holds them (two chunks), far along a long
// sequence: angles of 1e5 radians.
std::vector<index_t> zigzag_positions() { return {100000, 100001, 100002, 7, 8, 9}; }

TEST(Rotary, TableHoldsCosAndSinOfGlobalPositions) {
  const index_t dh = 8, half = dh / 2;
  const auto pos = zigzag_positions();
  const index_t n = pos.size();
  View3<double> cos("cos", 1, n, half), sin("sin", 1, n, half);
  kernels::rotary_table<double>(to_index_view("pos", pos), View2<const index_t>(), kTheta, cos, sin);
  const HostVec c = to_host(cos), s = to_host(sin);
  for (index_t p = 0; p < n; ++p)
    for (index_t i = 0; i < half; ++i) {
      const double a = expected_angle(pos[p], i, dh);
      EXPECT_NEAR(c[p * half + i], std::cos(a), 1e-12) << "position " << pos[p] << " pair " << i;
      EXPECT_NEAR(s[p * half + i], std::sin(a), 1e-12) << "position " << pos[p] << " pair " << i;
    }
}

TEST(Rotary, PositionsRestartAtEachDocument) {
  const index_t dh = 4, half = dh / 2, N = 12;
  // Sample 0: documents starting at 0, 5, 9; sample 1: one document.
  const std::vector<index_t> ids = {0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  View2<index_t> documents("documents", 2, N);
  auto host = Kokkos::create_mirror_view(documents);
  for (index_t e = 0; e < 2 * N; ++e) host.data()[e] = ids[e];
  Kokkos::deep_copy(documents, host);
  const std::vector<index_t> pos = {10, 11, 4, 5, 6};  // a rank's rows
  const index_t n = pos.size();
  View3<double> cos("cos", 2, n, half), sin("sin", 2, n, half);
  kernels::rotary_table<double>(to_index_view("pos", pos), documents, kTheta, cos, sin);
  const HostVec c = to_host(cos), s = to_host(sin);
  const std::vector<index_t> in_document[2] = {{1, 2, 4, 0, 1}, {10, 11, 4, 5, 6}};
  for (index_t b = 0; b < 2; ++b)
    for (index_t p = 0; p < n; ++p)
      for (index_t i = 0; i < half; ++i) {
        const double a = expected_angle(in_document[b][p], i, dh);
        EXPECT_NEAR(c[(b * n + p) * half + i], std::cos(a), 1e-12) << "sample " << b << " position " << pos[p];
        EXPECT_NEAR(s[(b * n + p) * half + i], std::sin(a), 1e-12) << "sample " << b << " position " << pos[p];
      }
}

// x' = x cos + rotate_half(x) sin, rotate_half(x) = (-x[Dh/2:], x[:Dh/2]).
HostVec rotate_half_loops(const HostVec& x, const std::vector<index_t>& pos, index_t batch, index_t heads,
                          index_t dh) {
  const index_t n = pos.size(), half = dh / 2;
  HostVec out(x.size());
  for (index_t r = 0; r < batch * heads * n; ++r)
    for (index_t d = 0; d < dh; ++d) {
      const double a = expected_angle(pos[r % n], d % half, dh);
      const double rotated_half = d < half ? -x[r * dh + d + half] : x[r * dh + d - half];
      out[r * dh + d] = x[r * dh + d] * std::cos(a) + rotated_half * std::sin(a);
    }
  return out;
}

struct Rotation {
  index_t batch = 2, heads = 3, dh = 8;
  std::vector<index_t> pos = zigzag_positions();
  View3<double> cos, sin;
  Rotation() : cos("cos", 1, index_t(pos.size()), 4), sin("sin", 1, index_t(pos.size()), 4) {
    kernels::rotary_table<double>(to_index_view("pos", pos), View2<const index_t>(), kTheta, cos, sin);
  }
  HostVec apply(const HostVec& x, bool inverse) const {
    auto v = to_view4<double>("x", x, batch, heads, index_t(pos.size()), dh);
    kernels::rotate<double>(v, cos, sin, inverse);
    return to_host(v);
  }
  std::size_t size() const { return batch * heads * pos.size() * dh; }
};

TEST(Rotary, RotatesEachHeadRowAsTheConventionSays) {
  const Rotation r;
  const HostVec x = Random(3).uniform(r.size(), -1, 1);
  EXPECT_LT(rel_error(r.apply(x, false), rotate_half_loops(x, r.pos, r.batch, r.heads, r.dh)), 1e-12);
}

TEST(Rotary, InverseIsTheTranspose) {
  const Rotation r;
  Random random(4);
  const HostVec x = random.uniform(r.size(), -1, 1), y = random.uniform(r.size(), -1, 1);
  const HostVec rx = r.apply(x, false), ry_back = r.apply(y, true);
  double left = 0, right = 0;  // <R x, y> = <x, R^T y>
  for (std::size_t e = 0; e < x.size(); ++e) {
    left += rx[e] * y[e];
    right += x[e] * ry_back[e];
  }
  EXPECT_NEAR(left, right, 1e-12 * std::abs(left) + 1e-12);
  EXPECT_LT(rel_error(r.apply(rx, true), x), 1e-13);  // and undoes the rotation
}

TEST(Rotary, Bf16RotatesInFp32AndRoundsOnce) {
  const Rotation r;
  const HostVec x = quantize<bf16>(Random(5).uniform(r.size(), -1, 1));
  View3<float> cos("cos", 1, index_t(r.pos.size()), 4), sin("sin", 1, index_t(r.pos.size()), 4);
  kernels::rotary_table<float>(to_index_view("pos", r.pos), View2<const index_t>(), kTheta, cos, sin);
  auto v = to_view4<bf16>("x", x, r.batch, r.heads, index_t(r.pos.size()), r.dh);
  kernels::rotate<bf16>(v, cos, sin, false);
  const HostVec got = to_host(v), want = rotate_half_loops(x, r.pos, r.batch, r.heads, r.dh);
  for (std::size_t e = 0; e < got.size(); ++e) EXPECT_NEAR(got[e], want[e], std::ldexp(std::abs(want[e]), -8) + 1e-6) << e;  // one rounding: half a bf16 ulp
}

}  // namespace
