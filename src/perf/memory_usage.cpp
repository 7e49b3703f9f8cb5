#include "perf/memory_usage.hpp"

#include <sys/resource.h>

namespace miniattn {

std::size_t peak_resident_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::size_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace miniattn
