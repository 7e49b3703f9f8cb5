#pragma once
// Small text outputs (the result JSON, a calibrated machine file).
#include <string>

namespace miniattn {

// Writes text next to path and renames it onto path, so that a reader never
// sees half a file and an existing file survives a failed write. The run's
// inputs were fine by then: a failure is a RuntimeFailure naming `key`.
void write_file_atomically(const std::string& path, const std::string& text, const std::string& key);

}  // namespace miniattn
