// Built while the runtime library (src/runtime/runtime.cc) does not exist yet.
#include "server/serve_run.h"

namespace kvtier::server {

Status run_server(const ServerConfig&, std::FILE*) {
  return Status::Unimplemented("this build has no runtime library (kvtier_runtime); kvtier serve cannot start");
}

}  // namespace kvtier::server
