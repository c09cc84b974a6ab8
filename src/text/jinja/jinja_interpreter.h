// The Jinja interpreter: runs a parsed template (jinja_ast.h) against a
// context of variables and returns the text, as jinja2 renders it.
//
// Scoping follows jinja2: `set` binds in the innermost for-iteration or macro
// scope (if blocks open none), each loop iteration starts a fresh scope, and a
// macro body sees its arguments, then the template's top-level variables.
// Globals: range, namespace, dict, raise_exception (fails the render with its
// message, verbatim), strftime_now (UTC, at RenderLimits::now_unix_seconds).
//
// A hostile template cannot run away: output and string sizes, the number of
// executed steps, list lengths, and the nesting of calls and expressions are
// capped by RenderLimits and fail the render with a clear error. One render
// is single-threaded; concurrent renders of one template are independent.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"
#include "text/jinja/jinja_ast.h"
#include "text/jinja/jinja_value.h"

namespace kvtier::text::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{8} << 20;  // also the largest string a render may build
  size_t max_list_items = 1'000'000;          // range() and list building
  uint64_t max_steps = 2'000'000;               // statements, loop iterations, calls, and a step per KiB of string
  int max_depth = 256;                        // nested expression evaluation + macro calls
  int64_t now_unix_seconds = 0;               // what strftime_now formats
};

// What builtins may ask of the render they run in.
class CallContext {
 public:
  virtual ~CallContext() = default;
  // Fails once `bytes` is over the output cap (for strings a builtin builds).
  virtual Status check_size(size_t bytes) const = 0;
  virtual Status check_items(size_t items) const = 0;
  // Charges `steps` units of work against the step budget.
  virtual Status charge(uint64_t steps) = 0;
  // A namespace owned by this render.
  virtual Namespace* make_namespace() = 0;
  // Calls a callable value (macros, bound methods, builtins).
  virtual Result<Value> call(const Value& callee, CallArgs& args) = 0;
  virtual int64_t now_unix_seconds() const = 0;
};

// `context` must be a dict (its entries become variables).
Result<std::string> render_template(const Body& body, const Value& context, const RenderLimits& limits);

}  // namespace kvtier::text::jinja
