#pragma once
// What cudnn_graphs.cpp checks and says about a call before cuDNN sees it:
// the contract of sdpa_call.hpp (cuDNN sees only the call's rows and could
// not check it), the words errors name a graph by, and the pointer at a
// call's first row. Apart from the frontend, whose translation unit is the
// slow one to compile; private to cudnn/.
#include <cstddef>
#include <string>

#include "kernels/attention/cudnn/cudnn_graphs.hpp"

namespace miniattn::kernels::cudnn_detail {

// "" when the call's extents are positive, its rows inside the block's
// tensors and its mask bounds fit an int (the frontend's band setters take one).
std::string shape_error(const SdpaCallShape& s);
// "forward SDPA graph (B=.. H=.. ...)", "backward ...": how errors name a graph.
std::string describe(const SdpaCallShape& s, bool backward);

// The same for a ragged call: positive extents and strides.
std::string ragged_shape_error(const SdpaRaggedShape& s);
std::string describe_ragged(const SdpaRaggedShape& s, bool backward);

// A block's base pointer moved `elements` of `element_bytes` on, to the call's
// first row. cuDNN's Hopper kernels load through TMA and the graphs declare
// their tensors 16-byte aligned (the frontend's default), so a null or
// misaligned pointer is refused here (std::runtime_error naming `tensor`)
// rather than read wrongly there.
void* at_row(const void* base, index_t elements, std::size_t element_bytes, const char* tensor);

}  // namespace miniattn::kernels::cudnn_detail
