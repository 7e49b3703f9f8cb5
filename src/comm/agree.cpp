#include "comm/agree.hpp"

#include <exception>

#include "comm/watched_mpi.hpp"
#include "core/error.hpp"

namespace miniattn {

void agree(MPI_Comm comm, const std::string& local_error) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int mine = local_error.empty() ? size : rank;
  int first = size;
  watched_allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm, "agree");
  if (first == size) return;
  int length = rank == first ? static_cast<int>(local_error.size()) : 0;
  watched_bcast(&length, 1, MPI_INT, first, comm, "agree.message");
  std::string message = rank == first ? local_error : std::string(static_cast<std::size_t>(length), '\0');
  if (length > 0) watched_bcast(&message[0], length, MPI_CHAR, first, comm, "agree.message");
  throw InputError(message);
}

std::string attempt(const std::function<void()>& body) {
  try {
    body();
    return {};
  } catch (const std::exception& e) {
    std::string message = e.what();
    return message.empty() ? std::string("unknown error") : message;
  } catch (...) {
    return "unknown error";
  }
}

void agree_on(MPI_Comm comm, const std::function<void()>& body) { agree(comm, attempt(body)); }

LeastOverRanks least_over_ranks(double value, MPI_Comm comm) {
  LeastOverRanks mine{value, 0}, least{value, 0};
  MPI_Comm_rank(comm, &mine.rank);
  watched_allreduce(&mine, &least, 1, MPI_DOUBLE_INT, MPI_MINLOC, comm, "agree.least");
  return least;
}

bool all_ranks(bool value, MPI_Comm comm) {
  int local = value ? 1 : 0, all = 0;
  watched_allreduce(&local, &all, 1, MPI_INT, MPI_LAND, comm, "agree.all_ranks");
  return all != 0;
}

}  // namespace miniattn
