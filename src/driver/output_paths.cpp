#include "driver/output_paths.hpp"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.hpp"

namespace miniattn {

namespace {

namespace fs = std::filesystem;

struct NamedPath {
  std::string key, path;
};

// Two spellings of one file (./a.h5, a.h5, a link to it) compare equal.
fs::path identity(const std::string& path) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  if (ec) return fs::path(path).lexically_normal();
  const fs::path canonical = fs::weakly_canonical(absolute, ec);
  return ec ? absolute.lexically_normal() : canonical;
}

void require_writable_file(const NamedPath& out) {
  const fs::path parent = fs::absolute(out.path).parent_path();
  std::error_code ec;
  if (!fs::is_directory(parent, ec))
    throw InputError(out.key + ": directory " + parent.string() + " of " + out.path + " does not exist");
  if (access(parent.c_str(), W_OK) != 0)
    throw InputError(out.key + ": directory " + parent.string() + " of " + out.path + " is not writable");
  const fs::file_status status = fs::status(out.path, ec);
  if (fs::is_directory(status)) throw InputError(out.key + ": " + out.path + " is a directory");
  if (fs::exists(status) && !fs::is_regular_file(status))
    throw InputError(out.key + ": " + out.path + " exists and is not a regular file (committing the output "
                     "renames a new file onto it)");
}

}  // namespace

void check_output_paths(const Config& c) {
  const RunMode mode = c.run.mode;
  const bool model_mode = mode == RunMode::predict || mode == RunMode::calibrate;
  std::vector<NamedPath> outputs, inputs{{"the input deck", c.deck_path}, {"io.restart", c.io.restart}};
  if (!model_mode) outputs.push_back({"io.snapshot", c.io.snapshot});
  outputs.push_back({"io.checkpoint", c.io.checkpoint});
  outputs.push_back({"run.result", c.run.result});
  (mode == RunMode::calibrate ? outputs : inputs).push_back({"run.machine", c.run.machine});
  if (!c.io.random_init()) inputs.push_back({"io.init", c.io.init});

  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const NamedPath& out = outputs[i];
    if (out.path.empty()) continue;
    require_writable_file(out);
    const fs::path file = identity(out.path);
    for (std::size_t j = 0; j < i; ++j)
      if (!outputs[j].path.empty() && identity(outputs[j].path) == file)
        throw InputError(out.key + ": " + out.path + " is also " + outputs[j].key + "'s file; each output needs "
                         "a file of its own");
    for (const NamedPath& in : inputs) {
      const bool goes_on_in_place = out.key == "io.checkpoint" && in.key == "io.restart";
      if (!in.path.empty() && !goes_on_in_place && identity(in.path) == file)
        throw InputError(out.key + ": " + out.path + " is " + in.key + (in.key == "the input deck" ? "" : "'s file") +
                         ", which this run reads; writing there would destroy it");
    }
  }
}

}  // namespace miniattn
