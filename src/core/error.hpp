#pragma once
// Errors the user can act on. InputError (bad deck, bad command line, bad
// file) ends the run with exit status 2; RuntimeFailure with status 1; a
// passed exchange deadline with kExitDeadline.
#include <stdexcept>
#include <string>

namespace miniattn {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RuntimeFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A failure every rank detects at the same point from the same (reduced)
// values, such as a non-finite loss: rank 0 reports it and every rank leaves
// through MPI_Finalize. No MPI_Abort, whose kill can swallow the message.
class CollectiveFailure : public RuntimeFailure {
 public:
  using RuntimeFailure::RuntimeFailure;
};

constexpr int kExitInputError = 2;
constexpr int kExitRuntimeFailure = 1;
// An exchange's deadline (run.exchange_timeout_s) passed: a rank stopped,
// hung, or took another path (comm/exchange_watch.hpp). sysexits' EX_TEMPFAIL:
// the same job may well run when submitted again.
constexpr int kExitDeadline = 75;

}  // namespace miniattn
