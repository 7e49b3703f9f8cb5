// sdpa_shape_checks.hpp: a call's checks and names, without the frontend.
#include "kernels/attention/cudnn/sdpa_shape_checks.hpp"

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>

namespace miniattn::kernels::cudnn_detail {

std::string shape_error(const SdpaCallShape& s) {
  const CudnnCall& c = s.call;
  if (s.batch <= 0 || s.heads <= 0 || s.kv_heads <= 0 || s.head_dim <= 0 || c.query_count <= 0 ||
      c.key_count <= 0) {
    return "extents must be positive";
  }
  if (c.query_offset < 0 || c.key_offset < 0 || c.query_offset + c.query_count > s.query_rows ||
      c.key_offset + c.key_count > s.key_rows) {
    return "the call's rows lie outside the block's tensors";
  }
  // The frontend's band setters take an int.
  if ((c.has_right_bound && std::llabs(c.right_bound) > INT_MAX) ||
      (c.has_left_bound && std::llabs(c.left_bound) > INT_MAX)) {
    return "a mask bound does not fit an int";
  }
  return "";
}

std::string describe(const SdpaCallShape& s, bool backward) {
  const CudnnCall& c = s.call;
  std::string text = std::string(backward ? "backward" : "forward") + " SDPA graph (B=" + std::to_string(s.batch) +
                     " H=" + std::to_string(s.heads) + " KV=" + std::to_string(s.kv_heads) +
                     " Dh=" + std::to_string(s.head_dim) + " queries " + std::to_string(c.query_count) + " of " +
                     std::to_string(s.query_rows) + ", keys " + std::to_string(c.key_count) + " of " +
                     std::to_string(s.key_rows);
  if (c.has_right_bound) text += ", right bound " + std::to_string(c.right_bound);
  if (c.has_left_bound) text += ", left bound " + std::to_string(c.left_bound);
  return text + ")";
}

std::string ragged_shape_error(const SdpaRaggedShape& s) {
  if (s.sequences <= 0 || s.heads <= 0 || s.kv_heads <= 0 || s.head_dim <= 0 || s.max_query_count <= 0 ||
      s.max_key_count <= 0) {
    return "extents must be positive";
  }
  if (s.query_head_stride <= 0 || s.query_row_stride <= 0 || s.key_head_stride <= 0 || s.key_row_stride <= 0)
    return "strides must be positive";
  return "";
}

std::string describe_ragged(const SdpaRaggedShape& s, bool backward) {
  return std::string(backward ? "backward" : "forward") + " ragged SDPA graph (" + std::to_string(s.sequences) +
         " sequences, H=" + std::to_string(s.heads) + " KV=" + std::to_string(s.kv_heads) +
         " Dh=" + std::to_string(s.head_dim) + ", at most " + std::to_string(s.max_query_count) + " queries and " +
         std::to_string(s.max_key_count) + " keys, head/row strides " + std::to_string(s.query_head_stride) + "/" +
         std::to_string(s.query_row_stride) + " and " + std::to_string(s.key_head_stride) + "/" +
         std::to_string(s.key_row_stride) + (s.causal ? ", causal)" : ")");
}

void* at_row(const void* base, index_t elements, std::size_t element_bytes, const char* tensor) {
  if (base == nullptr) throw std::runtime_error(std::string("cuDNN SDPA: tensor ") + tensor + " is null");
  const auto* bytes = static_cast<const unsigned char*>(base) + elements * static_cast<index_t>(element_bytes);
  if (reinterpret_cast<std::uintptr_t>(bytes) % 16 != 0) {
    throw std::runtime_error(std::string("cuDNN SDPA: tensor ") + tensor + " at the call's first row (" +
                             std::to_string(elements) + " elements past its base) is not 16-byte aligned");
  }
  return const_cast<unsigned char*>(bytes);
}

}  // namespace miniattn::kernels::cudnn_detail
