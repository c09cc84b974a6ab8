#include "common/file_text.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

namespace kvtier {

Result<std::string> read_file(const std::string& path, std::string_view what, uint64_t max_bytes) {
  // A directory read as an empty file (`--config /etc/kvtier/` started an unconfigured server), a
  // FIFO blocked, /dev/urandom was read until memory ran out: regular files only, bounded.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::NotFound("cannot open " + std::string(what) + " '" + path + "'");
  if (!S_ISREG(st.st_mode))
    return Status::InvalidArgument("the " + std::string(what) + " '" + path + "' is not a regular file");
  if (uint64_t(st.st_size) > max_bytes)
    return Status::InvalidArgument("the " + std::string(what) + " '" + path + "' is over " + std::to_string(max_bytes) +
                                   " bytes");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open " + std::string(what) + " '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IOError("reading " + std::string(what) + " '" + path + "' failed");
  return ss.str();
}

}  // namespace kvtier
