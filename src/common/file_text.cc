#include "common/file_text.h"

#include <fstream>
#include <sstream>

namespace kvtier {

Result<std::string> read_file(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open " + std::string(what) + " '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IOError("reading " + std::string(what) + " '" + path + "' failed");
  return ss.str();
}

}  // namespace kvtier
