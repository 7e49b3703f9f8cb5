// Preloaded into every test (LD_PRELOAD, tests/CMakeLists.txt): a rank that
// polls UCX and finds nothing to do gives up its core.
//
// The tests run 3, 4 and 8 ranks on machines with 2 cores. MPICH's ch4:ucx
// device (Debian's MPICH) busy-polls ucp_worker_progress while it waits and
// never yields, so a rank waiting in a collective spins through its whole time
// slice while the rank it waits for is not running: an 8-byte MPI_Allreduce
// took 4 ms on 3 or 4 ranks and 25 ms on 8 (1 us on 2), and a 3-rank
// checkpoint test spent 30 of its 38 s in them. Yielding after an empty poll
// hands the core to a rank that can make progress (0.02 ms on 4 ranks). Where
// each rank has a core, sched_yield returns at once; an MPI without UCX never
// calls this function.
//
// Only the scheduling of waiting ranks changes, never what they compute: the
// tests' results are the same with and without it.
#include <dlfcn.h>
#include <sched.h>

namespace {

using Progress = unsigned (*)(void* worker);

Progress ucx_progress() {
  static const Progress real = reinterpret_cast<Progress>(dlsym(RTLD_NEXT, "ucp_worker_progress"));
  return real;
}

}  // namespace

extern "C" unsigned ucp_worker_progress(void* worker) {
  const unsigned events = ucx_progress()(worker);
  if (events == 0) sched_yield();
  return events;
}
