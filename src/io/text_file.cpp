#include "io/text_file.hpp"

#include <cstdio>
#include <fstream>

#include "core/error.hpp"

namespace miniattn {

void write_file_atomically(const std::string& path, const std::string& text, const std::string& key) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
    if (!out) {
      std::remove(tmp.c_str());
      throw RuntimeFailure(key + ": cannot write " + tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw RuntimeFailure(key + ": cannot rename " + tmp + " to " + path);
}

}  // namespace miniattn
