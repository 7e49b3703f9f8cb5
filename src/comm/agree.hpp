#pragma once
// Decisions that may differ between ranks (a file one rank cannot open, the
// memory one node has) made the same on every rank before the next
// collective, so that one rank's error ends every rank with the same message
// instead of leaving the others waiting in a collective.
#include <mpi.h>

#include <functional>
#include <string>

namespace miniattn {

// Collective over comm: if any rank passes a non-empty error, every rank
// throws an InputError with the message of the lowest such rank.
void agree(MPI_Comm comm, const std::string& local_error);

// Runs body on this rank and returns the message of the exception it threw,
// or "" when it returned.
std::string attempt(const std::function<void()>& body);

// Collective: agree(comm, attempt(body)).
void agree_on(MPI_Comm comm, const std::function<void()>& body);

// Whether `value` holds on every rank of comm. Collective.
bool all_ranks(bool value, MPI_Comm comm);

// The least of the ranks' values and the lowest rank holding it (MPI_MINLOC),
// so every rank names the same rank in its message. Collective.
struct LeastOverRanks {
  double value;
  int rank;
};
LeastOverRanks least_over_ranks(double value, MPI_Comm comm);

}  // namespace miniattn
