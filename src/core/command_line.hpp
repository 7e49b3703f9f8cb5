#pragma once
// The command line: miniattn DECK.yaml [--set section.key=value ...]
#include <string>
#include <vector>

namespace miniattn {

struct CommandLine {
  std::string deck_path;
  std::vector<std::string> overrides;  // "section.key=value", in the order given
  bool help_requested = false;         // --help / -h: print help_text (rank 0) and exit 0
  std::string help_text;               // parse_command_line itself prints nothing
};

// Throws InputError with the usage text for a malformed command line.
CommandLine parse_command_line(int argc, const char* const* argv);

}  // namespace miniattn
