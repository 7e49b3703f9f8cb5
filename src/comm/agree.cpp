#include "comm/agree.hpp"

#include <exception>

#include "core/error.hpp"

namespace miniattn {

void agree(MPI_Comm comm, const std::string& local_error) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int mine = local_error.empty() ? size : rank;
  int first = size;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == size) return;
  int length = rank == first ? static_cast<int>(local_error.size()) : 0;
  MPI_Bcast(&length, 1, MPI_INT, first, comm);
  std::string message = rank == first ? local_error : std::string(static_cast<std::size_t>(length), '\0');
  if (length > 0) MPI_Bcast(&message[0], length, MPI_CHAR, first, comm);
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
  MPI_Allreduce(&mine, &least, 1, MPI_DOUBLE_INT, MPI_MINLOC, comm);
  return least;
}

bool all_ranks(bool value, MPI_Comm comm) {
  int local = value ? 1 : 0, all = 0;
  MPI_Allreduce(&local, &all, 1, MPI_INT, MPI_LAND, comm);
  return all != 0;
}

}  // namespace miniattn
