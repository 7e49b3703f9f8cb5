#include "kernels/layers/embedding.hpp"

#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/base/simd_pack.hpp"

namespace miniattn::kernels {

namespace embedding_detail {

// Number of entries of idx outside [0, limit). One small reduction (and a
// host synchronisation); done in the forward pass only.
index_t count_out_of_range(const View1<const index_t>& idx, index_t limit) {
  index_t bad = 0;
  Kokkos::parallel_reduce(
      "miniattn::embedding_check_indices",
      Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(0, static_cast<index_t>(idx.extent(0))),
      KOKKOS_LAMBDA(const index_t i, index_t& acc) {
        const index_t v = idx(i);
        if (v < 0 || v >= limit) acc += 1;
      },
      bad);
  return bad;
}

void check_shapes(const char* where, index_t rows, index_t d, const View1<const index_t>& tokens,
                  const View1<const index_t>& wpe_row, index_t vocab, index_t wte_d, index_t wpe_rows,
                  index_t wpe_d, index_t first_row) {
  std::ostringstream os;
  const index_t n = static_cast<index_t>(wpe_row.extent(0));
  if (static_cast<index_t>(tokens.extent(0)) != rows) {
    os << "tokens has " << tokens.extent(0) << " entries but x/dx has " << rows << " rows";
  } else if (first_row < 0 || (n == 0 && rows != 0)) {
    os << "first_row (" << first_row << ") is negative or there are rows but no local positions";
  } else if (wte_d != d || (wpe_rows > 0 && wpe_d != d)) {
    os << "wte, wpe_local and x must have the same width";
  } else if (count_out_of_range(tokens, vocab) != 0) {
    os << "a token is outside [0, " << vocab << ")";
  } else if (wpe_rows > 0 && count_out_of_range(wpe_row, wpe_rows) != 0) {
    os << "a wpe_row entry is outside [0, " << wpe_rows << ")";
  } else {
    return;
  }
  throw std::invalid_argument(std::string("kernels::") + where + ": " + os.str());
}

}  // namespace embedding_detail

template <class T>
void embedding_forward(const View1<const index_t>& tokens, const View1<const index_t>& wpe_row,
                       const View2<const T>& wte, const View2<const T>& wpe_local, const View2<T>& x,
                       index_t first_row) {
  const index_t rows = static_cast<index_t>(x.extent(0));
  const index_t d = static_cast<index_t>(x.extent(1));
  embedding_detail::check_shapes("embedding_forward", rows, d, tokens, wpe_row, static_cast<index_t>(wte.extent(0)),
                                 static_cast<index_t>(wte.extent(1)), static_cast<index_t>(wpe_local.extent(0)),
                                 static_cast<index_t>(wpe_local.extent(1)), first_row);
  if (rows == 0 || d == 0) return;
  const index_t n = static_cast<index_t>(wpe_row.extent(0));
  const bool learned = wpe_local.extent(0) > 0;
  using V = typename simd::Pack<Acc<T>>::type;
  simd::row_packs<Acc<T>>("miniattn::embedding_forward", rows, d,
                          KOKKOS_LAMBDA(const index_t r, const index_t c0, const int width) {
                            V sum = simd::load_n(&wte(tokens(r), c0), width);
                            if (learned) sum += simd::load_n(&wpe_local(wpe_row((first_row + r) % n), c0), width);
                            simd::store_n(&x(r, c0), sum, width);
                          });
}

TokenRows::TokenRows(index_t vocab, index_t row_count)
    : offsets("token_rows.offsets", vocab + 1),
      rows("token_rows.rows", row_count),
      host_tokens("token_rows.host_tokens", row_count),
      host_offsets(Kokkos::create_mirror_view(offsets)),
      host_rows(Kokkos::create_mirror_view(rows)) {}

void group_rows_by_token(const View1<const index_t>& tokens, TokenRows& grouped) {
  const index_t row_count = static_cast<index_t>(tokens.extent(0));
  const index_t vocab = static_cast<index_t>(grouped.offsets.extent(0)) - 1;
  if (static_cast<index_t>(grouped.rows.extent(0)) != row_count || vocab < 0)
    throw std::invalid_argument("kernels::group_rows_by_token: TokenRows is sized for " +
                                std::to_string(grouped.rows.extent(0)) + " rows, tokens has " +
                                std::to_string(row_count));
  Kokkos::deep_copy(grouped.host_tokens, tokens);
  const auto& token = grouped.host_tokens;
  const auto& offsets = grouped.host_offsets;
  for (index_t v = 0; v <= vocab; ++v) offsets(v) = 0;
  for (index_t r = 0; r < row_count; ++r) {
    if (token(r) < 0 || token(r) >= vocab)
      throw std::invalid_argument("kernels::group_rows_by_token: token " + std::to_string(token(r)) + " of row " +
                                  std::to_string(r) + " is outside [0, " + std::to_string(vocab) + ")");
    offsets(token(r) + 1) += 1;
  }
  for (index_t v = 0; v < vocab; ++v) offsets(v + 1) += offsets(v);
  std::vector<index_t> next(offsets.data(), offsets.data() + vocab);
  for (index_t r = 0; r < row_count; ++r) grouped.host_rows(next[static_cast<std::size_t>(token(r))]++) = r;
  Kokkos::deep_copy(grouped.offsets, offsets);
  Kokkos::deep_copy(grouped.rows, grouped.host_rows);
}

template <class T>
void embedding_backward(const View2<const T>& dx, const TokenRows& token_rows, const View1<const index_t>& wpe_row,
                        const View2<Param<T>>& dwte, const View2<Param<T>>& dwpe_local, index_t first_row) {
  const index_t rows = static_cast<index_t>(dx.extent(0));
  const index_t d = static_cast<index_t>(dx.extent(1));
  const index_t n = static_cast<index_t>(wpe_row.extent(0));
  const index_t vocab = static_cast<index_t>(dwte.extent(0));
  if (static_cast<index_t>(token_rows.rows.extent(0)) != rows ||
      static_cast<index_t>(token_rows.offsets.extent(0)) != vocab + 1 || first_row < 0 || (n == 0 && rows != 0) ||
      dwte.extent(1) != dx.extent(1) || (dwpe_local.extent(0) > 0 && dwpe_local.extent(1) != dx.extent(1)))
    throw std::invalid_argument("kernels::embedding_backward: dx [R, D], token_rows (vocab + 1 offsets, R rows), "
                                "dwte [vocab, D] and dwpe_local [., D] disagree, or first_row < 0");
  if (rows == 0 || d == 0) return;
  // Sums in Acc<T> (fp32 for bf16), added into the Param<T> gradients.
  using A = Acc<T>;
  using V = typename simd::Pack<A>::type;
  static_assert(std::is_same<A, Param<T>>::value, "gradients are summed in their own type");
  const View1<const index_t> offsets = token_rows.offsets, grouped = token_rows.rows;
  simd::row_packs<A>("miniattn::embedding_backward_wte", vocab, d,
                     KOKKOS_LAMBDA(const index_t v, const index_t c0, const int width) {
                       const index_t begin = offsets(v), end = offsets(v + 1);
                       if (begin == end) return;
                       V sum = simd::load_n(&dx(grouped(begin), c0), width);
                       for (index_t i = begin + 1; i < end; ++i) sum += simd::load_n(&dx(grouped(i), c0), width);
                       simd::store_n(&dwte(v, c0), V(simd::load_n(&dwte(v, c0), width) + sum), width);
                     });
  if (dwpe_local.extent(0) == 0) return;  // no learned positions
  simd::row_packs<A>("miniattn::embedding_backward_wpe", n, d,
                     KOKKOS_LAMBDA(const index_t i, const index_t c0, const int width) {
                       // The held rows of position i, r = g - first_row with g = s * n + i.
                       index_t r = ((i - first_row) % n + n) % n;
                       if (r >= rows) return;
                       V sum = simd::load_n(&dx(r, c0), width);
                       for (r += n; r < rows; r += n) sum += simd::load_n(&dx(r, c0), width);
                       A* const target = &dwpe_local(wpe_row(i), c0);
                       simd::store_n(target, V(simd::load_n(target, width) + sum), width);
                     });
}

#define MINIATTN_INSTANTIATE_EMBEDDING(T)                                                                       \
  template void embedding_forward<T>(const View1<const index_t>&, const View1<const index_t>&,                  \
                                     const View2<const T>&, const View2<const T>&, const View2<T>&, index_t);  \
  template void embedding_backward<T>(const View2<const T>&, const TokenRows&, const View1<const index_t>&,    \
                                      const View2<Param<T>>&, const View2<Param<T>>&, index_t);
MINIATTN_INSTANTIATE_EMBEDDING(float)
MINIATTN_INSTANTIATE_EMBEDDING(double)
MINIATTN_INSTANTIATE_EMBEDDING(bf16)
#undef MINIATTN_INSTANTIATE_EMBEDDING

}  // namespace miniattn::kernels
