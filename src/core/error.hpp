#pragma once
// Errors the user can act on. InputError (bad deck, bad command line, bad
// file) ends the run with exit status 2; RuntimeFailure with status 1.
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

constexpr int kExitInputError = 2;
constexpr int kExitRuntimeFailure = 1;

}  // namespace miniattn
