// Link check of the NCCL backend for builds without it (MINIATTN_NCCL_COMPILE_CHECK):
// referencing nccl_comm.cpp pulls its object file, and with it every NCCL and
// CUDA runtime symbol the backend uses, into this executable, so a missing or
// mismatched symbol fails the build. At run time it touches no GPU: it
// constructs and destroys an NcclComm (which allocates nothing on the device
// until a group is first used) and asks NCCL for its version, which needs no
// driver.
//
// Usage: miniattn_nccl_link_check [EXPECTED_NCCL_VERSION_CODE]
// Exit status 1 when the compiled-in NCCL_VERSION_CODE differs from the one given.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "comm/nccl_comm.hpp"

int main(int argc, char** argv) {
  const int header = miniattn::nccl_header_version();
  std::printf("miniattn_nccl_link_check: compiled against NCCL_VERSION_CODE %d\n", header);
  {
    miniattn::NcclComm comm;
    std::printf("miniattn_nccl_link_check: backend '%s' constructed and destroyed\n", comm.backend().c_str());
  }
  try {
    std::printf("miniattn_nccl_link_check: NCCL library reports version %d\n", miniattn::nccl_library_version());
  } catch (const std::exception& e) {
    std::printf("miniattn_nccl_link_check: %s\n", e.what());
    return 1;
  }
  if (argc > 1 && std::atoi(argv[1]) != header) {
    std::printf("miniattn_nccl_link_check: expected NCCL_VERSION_CODE %s\n", argv[1]);
    return 1;
  }
  return 0;
}
