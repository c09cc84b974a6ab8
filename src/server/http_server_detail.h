// Internal to HttpServer's sources (http_server.cc, http_stream.cc): the
// helpers both the whole and the streamed answers use.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "runtime/runtime.h"
#include "server/api.h"

namespace httplib {
struct Response;
}

namespace kvtier::server {

// An OpenAI-shaped error answer.
void send_error(httplib::Response& res, const ApiError& e);
// draining_error(), with kDrainingHeader.
void refuse_draining(httplib::Response& res);

// A token's text, for logprobs.
std::function<std::string(TokenId)> token_text(const TextCodec& codec);
// The chat memo's scope: a tenant's remembered replies are never spliced into another's prompts.
std::string memo_scope(std::string_view tenant, std::string_view salt);

}  // namespace kvtier::server
