// The tensor-core kernels' fragment layouts (src/kernels/attention/tensor_core/mma_fragments.hpp),
// checked without a GPU: against entries of the PTX ISA's figures for
// mma.m16n8k16 (bf16 A and B, fp32 C), for covering each matrix exactly once,
// and by emulating on the host the 32 lanes of a warp through the products
// the attention kernels chain: S = Q K^T from Q rows in memory and K rows
// staged with the kernels' padded stride, then O = P V with P taken from S's
// C fragments as the kernels take it (values never leave their lane) and V
// staged transposed. On a GPU the kernels themselves are compared with the
// gemm kernel (test_attention.cpp, AttentionBf16).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "core/bf16.hpp"
#include "kernels/attention/tensor_core/mma_fragments.hpp"

namespace {

namespace mma = miniattn::kernels::mma;
using miniattn::bf16;

constexpr int kLanes = mma::kWarpLanes;

// ---------------------------------------------------------------------------
// The PTX ISA's figures (lane, element) -> (row, column).

TEST(MmaFragments, MatchThePtxFigures) {
  struct Entry {
    int lane, e, row, col;
  };
  const Entry a[] = {{0, 0, 0, 0}, {0, 1, 0, 1}, {0, 2, 8, 0}, {0, 4, 0, 8}, {0, 7, 8, 9},
                     {5, 0, 1, 2}, {6, 3, 9, 5}, {31, 6, 15, 14}, {31, 7, 15, 15}};
  for (const Entry& x : a) {
    EXPECT_EQ(mma::a_element(x.lane, x.e).row, x.row) << "A lane " << x.lane << " a" << x.e;
    EXPECT_EQ(mma::a_element(x.lane, x.e).col, x.col) << "A lane " << x.lane << " a" << x.e;
  }
  const Entry b[] = {{0, 0, 0, 0}, {0, 1, 1, 0}, {0, 2, 8, 0}, {0, 3, 9, 0}, {5, 0, 2, 1}, {31, 3, 15, 7}};
  for (const Entry& x : b) {
    EXPECT_EQ(mma::b_element(x.lane, x.e).row, x.row) << "B lane " << x.lane << " b" << x.e;
    EXPECT_EQ(mma::b_element(x.lane, x.e).col, x.col) << "B lane " << x.lane << " b" << x.e;
  }
  const Entry c[] = {{0, 0, 0, 0}, {0, 1, 0, 1}, {0, 2, 8, 0}, {0, 3, 8, 1}, {5, 0, 1, 2}, {31, 3, 15, 7}};
  for (const Entry& x : c) {
    EXPECT_EQ(mma::c_element(x.lane, x.e).row, x.row) << "C lane " << x.lane << " c" << x.e;
    EXPECT_EQ(mma::c_element(x.lane, x.e).col, x.col) << "C lane " << x.lane << " c" << x.e;
  }
}

template <class Map>
std::set<std::pair<int, int>> covered(Map map, int elements) {
  std::set<std::pair<int, int>> seen;
  for (int lane = 0; lane < kLanes; ++lane)
    for (int e = 0; e < elements; ++e) seen.insert({map(lane, e).row, map(lane, e).col});
  return seen;
}

TEST(MmaFragments, EachCoversItsMatrixOnce) {
  const auto a = covered(mma::a_element, 2 * mma::kARegisters);
  const auto b = covered(mma::b_element, 2 * mma::kBRegisters);
  const auto c = covered(mma::c_element, mma::kCValues);
  EXPECT_EQ(a.size(), std::size_t(mma::kRows * mma::kDepth));
  EXPECT_EQ(b.size(), std::size_t(mma::kDepth * mma::kCols));
  EXPECT_EQ(c.size(), std::size_t(mma::kRows * mma::kCols));
  for (const auto& [row, col] : a) EXPECT_TRUE(row < mma::kRows && col < mma::kDepth);
  for (const auto& [k, n] : b) EXPECT_TRUE(k < mma::kDepth && n < mma::kCols);
  for (const auto& [row, col] : c) EXPECT_TRUE(row < mma::kRows && col < mma::kCols);
}

// ---------------------------------------------------------------------------
// A warp on the host: registers of 2 bf16 per lane, the mma's arithmetic.

using Word = std::uint32_t;
using AFragment = std::array<std::array<Word, mma::kARegisters>, kLanes>;
using BFragment = std::array<std::array<Word, mma::kBRegisters>, kLanes>;
using CFragment = std::array<std::array<float, mma::kCValues>, kLanes>;

Word pair_at(const std::vector<bf16>& m, int offset) {
  return Word(m[static_cast<std::size_t>(offset)].bits) | Word(m[static_cast<std::size_t>(offset) + 1].bits) << 16;
}
float half_of(Word w, int e) { return static_cast<float>(bf16::from_bits(static_cast<std::uint16_t>(w >> (16 * e)))); }
Word pack(float lo, float hi) { return Word(bf16(lo).bits) | Word(bf16(hi).bits) << 16; }

// D += A B, reading A and B back through the layouts as the hardware does.
void emulate_mma(const AFragment& a, const BFragment& b, CFragment& c) {
  float am[mma::kRows][mma::kDepth], bm[mma::kDepth][mma::kCols];
  for (int lane = 0; lane < kLanes; ++lane) {
    for (int e = 0; e < 2 * mma::kARegisters; ++e)
      am[mma::a_element(lane, e).row][mma::a_element(lane, e).col] = half_of(a[lane][e / 2], e % 2);
    for (int e = 0; e < 2 * mma::kBRegisters; ++e)
      bm[mma::b_element(lane, e).row][mma::b_element(lane, e).col] = half_of(b[lane][e / 2], e % 2);
  }
  for (int lane = 0; lane < kLanes; ++lane)
    for (int e = 0; e < mma::kCValues; ++e) {
      const auto at = mma::c_element(lane, e);
      double sum = c[lane][e];
      for (int k = 0; k < mma::kDepth; ++k) sum += double(am[at.row][k]) * bm[k][at.col];
      c[lane][e] = static_cast<float>(sum);
    }
}

// C (N tiles of 8 columns) += A B as accumulate_product does it: A row-major
// at `a` (16 rows, leading dimension lda, depth columns), B n-major at `b`.
std::vector<CFragment> product(const std::vector<bf16>& am, int lda, const std::vector<bf16>& bm, int ldb, int depth,
                               int n_tiles) {
  std::vector<CFragment> c(static_cast<std::size_t>(n_tiles), CFragment{});
  for (int j = 0; j < n_tiles; ++j)
    for (int s = 0; s < depth / mma::kDepth; ++s) {
      AFragment a;
      BFragment b;
      for (int lane = 0; lane < kLanes; ++lane) {
        for (int r = 0; r < mma::kARegisters; ++r) a[lane][r] = pair_at(am, s * mma::kDepth + mma::a_pair_offset(lane, r, lda));
        for (int r = 0; r < mma::kBRegisters; ++r)
          b[lane][r] = pair_at(bm, j * mma::kCols * ldb + s * mma::kDepth + mma::b_pair_offset(lane, r, ldb));
      }
      emulate_mma(a, b, c[static_cast<std::size_t>(j)]);
    }
  return c;
}

std::vector<bf16> random_bf16(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<bf16> x(n);
  for (auto& v : x) v = bf16(u(rng));
  return x;
}
double value(const std::vector<bf16>& m, int offset) { return static_cast<float>(m[static_cast<std::size_t>(offset)]); }

TEST(MmaFragments, WarpProductsOfTheAttentionKernelsMatchLoops) {
  constexpr int kDh = 64, kKeys = 64, kPad = 8, kStagedRow = kDh + kPad, kStagedCol = kKeys + kPad;
  std::mt19937 rng(7);
  const auto q = random_bf16(mma::kRows * kDh, rng);            // a warp's rows, as in memory
  const auto k = random_bf16(kKeys * kStagedRow, rng);          // a key block staged row-major
  const auto v_t = random_bf16(kDh * kStagedCol, rng);          // V staged transposed: v_t[d][key]
  const auto s = product(q, kDh, k, kStagedRow, kDh, kKeys / mma::kCols);  // S = Q K^T
  std::vector<double> s_loops(mma::kRows * kKeys);
  for (int i = 0; i < mma::kRows; ++i)
    for (int j = 0; j < kKeys; ++j) {
      double x = 0;
      for (int d = 0; d < kDh; ++d) x += value(q, i * kDh + d) * value(k, j * kStagedRow + d);
      s_loops[static_cast<std::size_t>(i * kKeys + j)] = x;
    }
  for (int lane = 0; lane < kLanes; ++lane)
    for (int j = 0; j < kKeys / mma::kCols; ++j)
      for (int e = 0; e < mma::kCValues; ++e) {
        const auto at = mma::c_element(lane, e);
        EXPECT_NEAR(s[j][lane][e], s_loops[static_cast<std::size_t>(at.row * kKeys + j * mma::kCols + at.col)], 1e-4);
      }

  // P: S rounded to bf16, as the next product's A, register by register as
  // the kernels' as_a_fragments take it from the C tiles.
  std::vector<bf16> p(mma::kRows * kKeys);  // the P the loops see
  for (int lane = 0; lane < kLanes; ++lane)
    for (int j = 0; j < kKeys / mma::kCols; ++j)
      for (int e = 0; e < mma::kCValues; ++e) {
        const auto at = mma::c_element(lane, e);
        p[static_cast<std::size_t>(at.row * kKeys + j * mma::kCols + at.col)] = bf16(s[j][lane][e]);
      }
  std::vector<CFragment> o(kDh / mma::kCols, CFragment{});
  for (int t = 0; t < kKeys / mma::kDepth; ++t)
    for (int j = 0; j < kDh / mma::kCols; ++j) {
      AFragment a;
      BFragment b;
      for (int lane = 0; lane < kLanes; ++lane) {
        for (int r = 0; r < mma::kARegisters; ++r) {
          const float* pair = &s[static_cast<std::size_t>(2 * t + mma::c_tile_of_a(r))][lane][mma::c_value_of_a(r)];
          a[lane][r] = pack(pair[0], pair[1]);
        }
        for (int r = 0; r < mma::kBRegisters; ++r)
          b[lane][r] = pair_at(v_t, j * mma::kCols * kStagedCol + t * mma::kDepth + mma::b_pair_offset(lane, r, kStagedCol));
      }
      emulate_mma(a, b, o[static_cast<std::size_t>(j)]);
    }
  for (int lane = 0; lane < kLanes; ++lane)
    for (int j = 0; j < kDh / mma::kCols; ++j)
      for (int e = 0; e < mma::kCValues; ++e) {
        const auto at = mma::c_element(lane, e);
        const int d = j * mma::kCols + at.col;
        double x = 0;
        for (int key = 0; key < kKeys; ++key) x += value(p, at.row * kKeys + key) * value(v_t, d * kStagedCol + key);
        EXPECT_NEAR(o[j][lane][e], x, 1e-4) << "O row " << at.row << " column " << d;
      }
}

// ldmatrix.x4 on the host: matrix m's 8 rows start where lanes 8m .. 8m + 7
// point (element offsets into `m`); each lane's registers filled as the PTX
// ISA distributes them.
std::array<std::array<Word, 4>, kLanes> emulate_ldmatrix_x4(const std::vector<bf16>& m,
                                                            const std::array<int, kLanes>& row_at, bool trans) {
  std::array<std::array<Word, 4>, kLanes> loaded{};
  for (int lane = 0; lane < kLanes; ++lane)
    for (int matrix = 0; matrix < 4; ++matrix)
      for (int i = 0; i < 2; ++i) {
        const auto at = mma::ldsm_element(lane, i, trans);
        const int offset = row_at[static_cast<std::size_t>(8 * matrix + at.row)] + at.col;
        loaded[lane][matrix] |= Word(m[static_cast<std::size_t>(offset)].bits) << (16 * i);
      }
  return loaded;
}

// The kernels load B fragments with ldmatrix from rows staged with padding:
// K's rows (n-major B, two k-steps a load) and V's rows (k-major B through
// .trans, two 8-column tiles a load). Each register must hold the pair the
// B layout (b_element) asks for.
TEST(MmaFragments, LdmatrixLoadsTheBFragments) {
  constexpr int kLd = 64 + 8;     // a staged row: 64 values and the kernels' padding
  constexpr int kTile = 3, kStep = 2;  // an interior 8-column tile and k-step
  std::mt19937 rng(11);
  const auto m = random_bf16(64 * kLd, rng);
  std::array<int, kLanes> row_at{};
  for (int lane = 0; lane < kLanes; ++lane) {
    const auto at = mma::b_nmajor_row(lane);
    row_at[static_cast<std::size_t>(lane)] = (kTile * mma::kCols + at.row) * kLd + kStep * mma::kDepth + at.col;
  }
  const auto nmajor = emulate_ldmatrix_x4(m, row_at, false);
  for (int lane = 0; lane < kLanes; ++lane)
    for (int step = 0; step < 2; ++step)
      for (int r = 0; r < mma::kBRegisters; ++r)
        EXPECT_EQ(nmajor[lane][2 * step + r],
                  pair_at(m, kTile * mma::kCols * kLd + (kStep + step) * mma::kDepth + mma::b_pair_offset(lane, r, kLd)))
            << "n-major lane " << lane << " k-step +" << step << " b" << r;

  for (int lane = 0; lane < kLanes; ++lane) {
    const auto at = mma::b_kmajor_row(lane);
    row_at[static_cast<std::size_t>(lane)] = (kStep * mma::kDepth + at.row) * kLd + kTile * mma::kCols + at.col;
  }
  const auto kmajor = emulate_ldmatrix_x4(m, row_at, true);
  for (int lane = 0; lane < kLanes; ++lane)
    for (int tile = 0; tile < 2; ++tile)
      for (int r = 0; r < mma::kBRegisters; ++r) {
        Word expected = 0;
        for (int i = 0; i < 2; ++i) {
          const auto kn = mma::b_element(lane, 2 * r + i);
          const int offset = (kStep * mma::kDepth + kn.row) * kLd + (kTile + tile) * mma::kCols + kn.col;
          expected |= Word(m[static_cast<std::size_t>(offset)].bits) << (16 * i);
        }
        EXPECT_EQ(kmajor[lane][2 * tile + r], expected) << "k-major lane " << lane << " tile +" << tile << " b" << r;
      }
}

// The key-gradient kernel loads K's and V's A fragments with ldmatrix from
// rows staged with padding: each register must hold the pair the A layout
// (a_element) asks for, at every k-step of the head.
TEST(MmaFragments, LdmatrixLoadsTheAFragments) {
  constexpr int kLd = 128 + 8;  // a staged row: a head of 128 values and the kernels' padding
  std::mt19937 rng(13);
  const auto m = random_bf16(mma::kRows * kLd, rng);
  for (int step = 0; step < 128 / mma::kDepth; ++step) {
    std::array<int, kLanes> row_at{};
    for (int lane = 0; lane < kLanes; ++lane) {
      const auto at = mma::a_row_major_row(lane);
      row_at[static_cast<std::size_t>(lane)] = at.row * kLd + step * mma::kDepth + at.col;
    }
    const auto loaded = emulate_ldmatrix_x4(m, row_at, false);
    for (int lane = 0; lane < kLanes; ++lane)
      for (int r = 0; r < mma::kARegisters; ++r)
        EXPECT_EQ(loaded[lane][r], pair_at(m, step * mma::kDepth + mma::a_pair_offset(lane, r, kLd)))
            << "lane " << lane << " k-step " << step << " a" << r;
  }
}

// The kernels decide which scores a mask hides before the products, as one
// bit per C value (hidden_c_values), and read the bits back per (tile, value):
// each bit must name the pair its C value holds, through the lane's row slot.
constexpr int kMaskTiles = 8, kMaskColumns = kMaskTiles * mma::kCols;  // a 64-key block

// A 16 x 64 pattern of hidden pairs as the kernels' mask lambdas ask for it
// (a functor callable where hidden_c_values is: host and device).
struct PatternMask {
  const bool* hidden;  // [16][64]
  int lane;
  KOKKOS_INLINE_FUNCTION bool operator()(int column, int slot) const {
    return hidden[mma::c_element(lane, 2 * slot).row * kMaskColumns + column];
  }
};

// as_a_fragments packs C value e of tile t into register c_tile_of_a /
// c_value_of_a name; a_register_of_c (how add_row_sums reads P's bf16 values
// back) must find every one of them there.
TEST(MmaFragments, ARegisterOfCFindsEachPackedValue) {
  constexpr int kTiles = 8;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  float c[kTiles][mma::kCValues];
  for (auto& tile : c)
    for (float& x : tile) x = u(rng);
  Word a[kTiles / 2][mma::kARegisters];
  for (int s = 0; s < kTiles / 2; ++s)
    for (int r = 0; r < mma::kARegisters; ++r) {
      const float* pair = c[2 * s + mma::c_tile_of_a(r)] + mma::c_value_of_a(r);
      a[s][r] = pack(pair[0], pair[1]);
    }
  for (int t = 0; t < kTiles; ++t)
    for (int e = 0; e < mma::kCValues; ++e)
      EXPECT_EQ(half_of(a[t / 2][mma::a_register_of_c(t, e)], e % 2), static_cast<float>(bf16(c[t][e])))
          << "tile " << t << " c" << e;
}

TEST(MmaFragments, HiddenBitsNameEachLanesPairs) {
  std::mt19937 rng(5);
  std::bernoulli_distribution coin(0.5);
  bool hidden[mma::kRows * kMaskColumns];  // row-major
  for (bool& pair : hidden) pair = coin(rng);
  for (int lane = 0; lane < kLanes; ++lane) {
    const std::uint32_t bits = mma::hidden_c_values<kMaskTiles>(lane, PatternMask{hidden, lane});
    for (int tile = 0; tile < kMaskTiles; ++tile)
      for (int e = 0; e < mma::kCValues; ++e) {
        const auto at = mma::c_element(lane, e);
        EXPECT_EQ(mma::is_hidden(bits, tile, e), hidden[at.row * kMaskColumns + tile * mma::kCols + at.col])
            << "lane " << lane << " tile " << tile << " c" << e;
      }
  }
}

}  // namespace
