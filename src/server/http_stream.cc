// HttpServer's streamed answers: server-sent events chunk by chunk, and the
// rest of a stream written past httplib to a client that half-closed.
#include <httplib.h>

#include <chrono>
#include <cstdio>

#include "server/chat_api.h"
#include "server/client_connection.h"
#include "server/http_server.h"
#include "server/http_server_detail.h"

namespace kvtier::server {
namespace {

using namespace std::chrono_literals;

// The head of a streamed answer written past httplib (HttpServer::stream), the connection closed after it.
constexpr std::string_view kRawStreamHead =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n"
    "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";

// `data` as one chunk of a chunked body (RFC 9112 §7.1).
std::string chunk_frame(std::string_view data) {
  char size[20];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return std::string(size, size_t(n)) + std::string(data) + "\r\n";
}


}  // namespace

struct HttpServer::StreamJob {
  std::shared_ptr<const Generation> gen;
  std::shared_ptr<RequestState> state;
  CompletionMeta meta;
  std::optional<ClientConnection> connection;
  bool chat = false, with_detail = false;
  RequestState::StreamCursor cursor;
  size_t text_offset = 0;     // bytes of text (echoed prompt included) the sent tokens span
  std::string text;           // chat: the reply so far, to remember it
  std::vector<TokenId> ids;   // chat: its tokens
  std::optional<ReasoningStream> reasoning;  // --reasoning-parser think: splits off <think>...</think>
  std::optional<ToolCallStream> tools;       // chat with tools: holds back what may be a tool call
  bool sent_first = false, echoed = false, finished = false;
  // The connection's bytes sent when the handler returned: httplib wrote the head once they grew.
  std::optional<uint64_t> sent_at_start;
};

void HttpServer::stream(httplib::Response& res, std::shared_ptr<const Generation> gen,
                        std::shared_ptr<RequestState> state, const CompletionMeta& meta,
                        std::optional<ClientConnection> connection) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto job = std::make_shared<StreamJob>();
  const CompletionRequest& req = gen->request;
  job->chat = gen->endpoint == Endpoint::kChat;
  job->with_detail = req.echo || req.logprobs >= 0 || req.return_token_ids;
  if (!gen->tool_names.empty()) job->tools.emplace(tool_parser_, gen->tool_names);
  if (job->chat && config_.reasoning_parser == ReasoningParser::kThink)
    job->reasoning.emplace(prompt_opens_reasoning(gen->rendered));
  if (connection) job->sent_at_start = connection->bytes_sent();
  job->gen = std::move(gen), job->state = std::move(state), job->meta = meta, job->connection = connection;
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, job](size_t, httplib::DataSink& sink) {
        auto [out, v] = stream_step(*job);
        if (!sink.write(out.data(), out.size())) {
          if (job->connection && job->connection->half_closed()) {
            // httplib calls the provider even when it could not write the head: then nothing went out.
            const auto sent = job->connection->bytes_sent();
            const bool head_sent = sent && job->sent_at_start && *sent > *job->sent_at_start;
            return stream_rest_raw(*job, std::move(out), std::move(v), !head_sent);
          }
          if (job->state->cancel()) metrics_.record_client_disconnect();
          return false;
        }
        if (v.done) {
          job->finished = true;
          metrics_.record_completion(v.usage, v.error);
          sink.done();
        }
        return true;
      },
      [this, job](bool success) {
        const std::optional<ClientConnection>& c = job->connection;
        // httplib gave up before calling the provider: a client that half-closed gets the whole stream here.
        if (!success && !job->finished && c && c->half_closed() && job->sent_at_start &&
            c->bytes_sent() == job->sent_at_start) {
          auto [out, v] = stream_step(*job);
          (void)stream_rest_raw(*job, std::move(out), std::move(v), true);
        }
        // Client gone (or server stopping) before the end: free the sequence.
        if (!success || !job->finished) {
          job->state->cancel();
          if (!job->finished) {
            const RequestState::View end = job->state->wait_done();
            metrics_.record_completion(end.usage, end.error.ok() ? Status::Cancelled("the stream ended early") : end.error);
          }
        }
      });
}

std::pair<std::string, RequestState::View> HttpServer::stream_step(StreamJob& job) {
  const CompletionRequest& request = job.gen->request;
  // Wait for text; send a comment line when idle so a vanished client
  // is noticed (the write fails) even while the request is queued.
  RequestState::View v = job.state->wait(job.cursor, job.sent_first, 1000ms);
  std::string out;
  // The first token always gets an event, even when its text is held
  // back (a possible stop string or half a UTF-8 character): clients
  // measure TTFT by it.
  if (!v.done && (!v.delta.empty() || (v.started && !job.sent_first) || (job.with_detail && !v.tokens.ids.empty()))) {
    out += stream_chunk(job, v, std::nullopt, false);
    job.sent_first = true;
  }
  if (v.done) {
    if (!v.error.ok()) {
      if (!v.delta.empty()) out += stream_chunk(job, v, std::nullopt, false);
      out += sse_event(error_json(error_from_status(v.error)));
    } else {
      // As OpenAI: the usage goes in one chunk of its own, and only when asked for (a client that
      // adds up every chunk's usage, as LangChain does, counted it twice when the finish carried it too).
      out += job.tools ? stream_tool_call_end(job, v) : stream_chunk(job, v, v.finish_reason, true);
      if (request.stream_include_usage)
        out += sse_event(job.chat ? chat_chunk_json(job.meta, "", false, std::nullopt, &v.usage, false)
                                  : stream_chunk_json(job.meta, "", std::nullopt, &v.usage, false));
      if (job.chat)
        chat_->remember(job.gen->rendered, job.text, request.prompt, job.ids, memo_scope(request.tenant, request.cache_salt));
    }
    out += "data: [DONE]\n\n";
  }
  if (out.empty()) out = ": waiting\n\n";
  return {std::move(out), std::move(v)};
}

// One content chunk per wake-up: its text, and the tokens (and the echoed prompt) that came with it.
// `last`: the reply ends with this chunk (what the reasoning split held back goes out).
std::string HttpServer::stream_chunk(StreamJob& job, const RequestState::View& v, std::optional<std::string_view> finish,
                                     bool last) {
  const CompletionRequest& request = job.gen->request;
  std::string text = v.delta;
  CompletionDetail d{request.logprobs, request.return_token_ids, {}, &v.tokens, job.text_offset,
                     token_text(scheduler_->model().text), request.tokens_as_ids};
  if (request.echo && !job.echoed) {
    d.prompt = request.prompt;
    text = scheduler_->model().text.detokenize(request.prompt) + text;
    job.echoed = true;
  }
  if (job.with_detail) job.text_offset += d.text_bytes();
  const CompletionDetail* detail = job.with_detail ? &d : nullptr;
  if (!job.chat) return sse_event(stream_chunk_json(job.meta, text, finish, nullptr, true, detail));
  job.text += v.delta;
  job.ids.insert(job.ids.end(), v.tokens.ids.begin(), v.tokens.ids.end());
  std::string reasoning;
  if (job.reasoning) {
    ReasoningSplit s = job.reasoning->push(text);
    if (last) {
      ReasoningSplit rest = job.reasoning->finish();
      s.reasoning += rest.reasoning, s.content += rest.content;
    }
    reasoning = std::move(s.reasoning), text = std::move(s.content);
  }
  if (job.tools) text = job.tools->push(text);
  return sse_event(chat_chunk_json(job.meta, text, !job.sent_first, finish, nullptr, true, detail, reasoning));
}

// The end of a reply whose tool calls are parsed: the held-back content, the calls, then the finish.
std::string HttpServer::stream_tool_call_end(StreamJob& job, const RequestState::View& v) {
  std::string events = stream_chunk(job, v, std::nullopt, /*last=*/true);
  job.sent_first = true;
  const ParsedReply end = job.tools->finish();
  if (!end.content.empty()) events += sse_event(chat_chunk_json(job.meta, end.content, false, std::nullopt, nullptr));
  for (const std::string& c : chat_tool_call_chunks(job.meta, end.calls)) events += sse_event(c);
  const std::string_view finish = end.calls.empty() ? std::string_view(v.finish_reason) : "tool_calls";
  return events + sse_event(chat_chunk_json(job.meta, "", false, finish, nullptr));
}

// httplib 0.11 writes nothing to a client whose FIN arrived, but one that
// half-closed after sending its request still reads: the rest of the stream
// (and the head, when httplib wrote none) goes out here, framed as httplib
// frames it.
bool HttpServer::stream_rest_raw(StreamJob& job, std::string out, RequestState::View v, bool head) {
  std::string bytes = head ? std::string(kRawStreamHead) : std::string();
  for (;;) {
    bytes += chunk_frame(out);
    if (v.done) bytes += "0\r\n\r\n";
    if (!job.connection->send_all(bytes)) {
      if (job.state->cancel()) metrics_.record_client_disconnect();
      return false;
    }
    if (v.done) break;
    std::tie(out, v) = stream_step(job);
    bytes.clear();
  }
  job.finished = true;
  metrics_.record_completion(v.usage, v.error);
  return true;
}

}  // namespace kvtier::server
