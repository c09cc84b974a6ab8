// run_server(): the whole `kvtier serve` process body.
//
// Creates the Runtime from config.runtime, hands it to a Scheduler, binds the
// HTTP server, prints "kvtier serve: listening on http://HOST:PORT" (one line,
// flushed, so scripts and tests can learn a port chosen with --port 0) and
// serves until SIGINT or SIGTERM; SIGHUP reloads the keys (server/auth.h).
// The keys are read before the model loads, and what is insecure about the
// set-up is logged as a warning. Then it stops accepting work (new requests
// get 503), lets in-flight requests finish for limits.shutdown_grace_s,
// cancels the rest, stops HTTP and destroys the Runtime on its own thread,
// which persists the disk tier so a restart is warm. Returns OK on a clean
// shutdown. Call once per process: it installs SIGINT/SIGTERM/SIGHUP handlers for
// its duration (restoring the previous ones on return).
#pragma once

#include <cstdio>

#include "server/config.h"

namespace kvtier::server {

Status run_server(const ServerConfig& config, std::FILE* log);

}  // namespace kvtier::server
