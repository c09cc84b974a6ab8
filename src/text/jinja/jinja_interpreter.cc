#include "text/jinja/jinja_interpreter.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>

#include "text/jinja/jinja_builtins.h"
#include "text/jinja/jinja_globals.h"
#include "text/jinja/jinja_operators.h"

namespace kvtier::text::jinja {
namespace {

struct Scope {
  const Scope* parent = nullptr;
  std::unordered_map<std::string, Value> variables;

  const Value* find(const std::string& name) const {
    for (const Scope* scope = this; scope != nullptr; scope = scope->parent) {
      auto it = scope->variables.find(name);
      if (it != scope->variables.end()) return &it->second;
    }
    return nullptr;
  }
};

enum class Flow { kNormal, kBreak, kContinue };

Status render_error(int line, const std::string& what) {
  return Status::InvalidArgument("jinja: line " + std::to_string(line) + ": " + what);
}

class Renderer final : public CallContext {
 public:
  Renderer(const Value& context, const RenderLimits& limits) : context_(context), limits_(limits) {}

  Result<std::string> run(const Body& body) {
    std::string out;
    out_ = &out;
    Flow flow = Flow::kNormal;
    KVTIER_RETURN_IF_ERROR(exec_body(body, root_, flow));
    return out;
  }

  Status check_size(size_t bytes) const override {
    if (bytes <= limits_.max_output_bytes) return Status::Ok();
    return Status::OutOfRange("jinja: output or string larger than " + std::to_string(limits_.max_output_bytes) +
                              " bytes");
  }
  Status check_items(size_t items) const override {
    if (items <= limits_.max_list_items) return Status::Ok();
    return Status::OutOfRange("jinja: list longer than " + std::to_string(limits_.max_list_items) + " items");
  }
  Status charge(uint64_t steps) override {
    steps_ += steps;
    if (steps_ <= limits_.max_steps) return Status::Ok();
    return Status::OutOfRange("jinja: render exceeded " + std::to_string(limits_.max_steps) + " steps");
  }
  Namespace* make_namespace() override {
    namespaces_.push_back(std::make_unique<Namespace>());
    return namespaces_.back().get();
  }
  int64_t now_unix_seconds() const override { return limits_.now_unix_seconds; }

  Result<Value> call(const Value& callee, CallArgs& args) override {
    if (callee.is_undefined()) return undefined_error(callee);
    if (!callee.is_callable()) {
      return Status::InvalidArgument("'" + std::string(callee.type_name()) + "' object is not callable");
    }
    KVTIER_RETURN_IF_ERROR(charge(1));
    if (++depth_ > limits_.max_depth) return Status::OutOfRange("jinja: calls nested too deeply");
    auto result = callee.as_callable().call(*this, args);
    --depth_;
    return result;
  }

 private:
  // ---- statements ----
  Status exec_body(const Body& body, Scope& scope, Flow& flow) {
    for (const NodePtr& node : body) {
      KVTIER_RETURN_IF_ERROR(exec_node(*node, scope, flow));
      if (flow != Flow::kNormal) break;
    }
    return Status::Ok();
  }

  Status emit(std::string_view text) {
    KVTIER_RETURN_IF_ERROR(check_size(out_->size() + text.size()));
    out_->append(text);
    return Status::Ok();
  }

  // Errors gain the line of their statement, except raise_exception's (kFailedPrecondition), kept verbatim.
  Status exec_node(const Node& node, Scope& scope, Flow& flow) {
    Status status = exec_node_inner(node, scope, flow);
    if (status.ok() || status.is(StatusCode::kFailedPrecondition) || status.message().rfind("jinja: line", 0) == 0) {
      return status;
    }
    const std::string& message = status.message();
    const std::string detail = message.rfind("jinja: ", 0) == 0 ? message.substr(7) : message;
    return Status(status.code(), "jinja: line " + std::to_string(node.line) + ": " + detail);
  }

  Status exec_node_inner(const Node& node, Scope& scope, Flow& flow) {
    KVTIER_RETURN_IF_ERROR(charge(1));
    switch (node.kind) {
      case Node::Kind::kText: return emit(node.text);
      case Node::Kind::kOutput: {
        KVTIER_ASSIGN_OR_RETURN(Value value, eval(*node.expr, scope));
        return emit(to_str(value));
      }
      case Node::Kind::kIf: {
        for (const auto& [condition, body] : node.branches) {
          KVTIER_ASSIGN_OR_RETURN(Value test, eval(*condition, scope));
          if (test.truthy()) return exec_body(body, scope, flow);
        }
        return exec_body(node.else_body, scope, flow);
      }
      case Node::Kind::kFor: return exec_for(node, scope);
      case Node::Kind::kSet: return exec_set(node, scope);
      case Node::Kind::kSetBlock: {
        // A break or continue inside the block leaves it, as in jinja2: nothing is assigned.
        KVTIER_ASSIGN_OR_RETURN(std::string text, capture(node.body, scope, flow));
        if (flow == Flow::kNormal) scope.variables[node.targets[0]] = Value(std::move(text));
        return Status::Ok();
      }
      case Node::Kind::kMacro: scope.variables[node.name] = make_macro(node, scope); return Status::Ok();
      case Node::Kind::kScope: {
        Scope inner{&scope, {}};
        return exec_body(node.body, inner, flow);
      }
      case Node::Kind::kBreak: flow = Flow::kBreak; return Status::Ok();
      case Node::Kind::kContinue: flow = Flow::kContinue; return Status::Ok();
    }
    return Status::Internal("jinja: unknown node");
  }

  // Runs `body` in `scope` with its output captured (block set, macro call); a
  // break or continue in it is left in `flow`.
  Result<std::string> capture(const Body& body, Scope& scope, Flow& flow) {
    std::string captured;
    std::string* saved = out_;
    out_ = &captured;
    Status status = exec_body(body, scope, flow);
    out_ = saved;
    KVTIER_RETURN_IF_ERROR(status);
    return captured;
  }

  static Status bind_targets(const std::vector<std::string>& targets, const Value& value, Scope& scope, int line) {
    if (targets.size() == 1) {
      scope.variables[targets[0]] = value;
      return Status::Ok();
    }
    KVTIER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(value));
    if (items.size() != targets.size()) {
      return render_error(line, "cannot unpack " + std::to_string(items.size()) + " values into " +
                                    std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope.variables[targets[i]] = items[i];
    return Status::Ok();
  }

  Status exec_set(const Node& node, Scope& scope) {
    KVTIER_ASSIGN_OR_RETURN(Value value, eval(*node.expr, scope));
    // What a template keeps (a variable, a namespace attribute; namespace() checks its own) nests at
    // most kMaxValueNesting deep: `{% set a = [a] %}` in a loop nested without end, and freeing the
    // value overflowed the stack.
    if (nesting_depth(value) > kMaxValueNesting) return render_error(node.line, "value nested too deeply");
    if (node.attribute.empty()) return bind_targets(node.targets, value, scope, node.line);
    const Value* target = lookup(node.targets[0], scope);
    if (target == nullptr || !target->is_namespace()) {
      return render_error(node.line, "cannot assign attribute on non-namespace object");
    }
    target->as_namespace().set(node.attribute, std::move(value));
    return Status::Ok();
  }

  Result<std::vector<Value>> loop_items(const Node& node, Scope& scope) {
    KVTIER_ASSIGN_OR_RETURN(Value iterable, eval(*node.expr, scope));
    if (iterable.is_none() || iterable.is_number() || iterable.is_callable() || iterable.is_namespace()) {
      return render_error(node.line, "'" + std::string(iterable.type_name()) + "' object is not iterable");
    }
    KVTIER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(iterable));
    if (!node.condition) return items;
    std::vector<Value> kept;
    for (Value& item : items) {
      KVTIER_RETURN_IF_ERROR(charge(1));
      Scope filter_scope{&scope, {}};
      KVTIER_RETURN_IF_ERROR(bind_targets(node.targets, item, filter_scope, node.line));
      KVTIER_ASSIGN_OR_RETURN(Value keep, eval(*node.condition, filter_scope));
      if (keep.truthy()) kept.push_back(std::move(item));
    }
    return kept;
  }

  // What loop.changed(...) was last called with in one loop (none before its first call).
  using LastChanged = std::shared_ptr<std::optional<std::vector<Value>>>;

  static Value loop_object(const std::vector<Value>& items, size_t index, const LastChanged& last_changed) {
    const auto length = static_cast<int64_t>(items.size());
    const auto position = static_cast<int64_t>(index);
    std::vector<std::pair<std::string, Value>> entries = {
        {"index", position + 1},           {"index0", position},
        {"revindex", length - position},   {"revindex0", length - position - 1},
        {"first", index == 0},             {"last", position == length - 1},
        {"length", length},                {"depth", 1},
        {"depth0", 0}};
    if (index > 0) entries.emplace_back("previtem", items[index - 1]);
    if (position + 1 < length) entries.emplace_back("nextitem", items[index + 1]);
    auto cycle = std::make_shared<Callable>();
    cycle->name = "cycle";
    cycle->call = [index](CallContext&, CallArgs& args) -> Result<Value> {
      if (args.positional.empty()) return Status::InvalidArgument("no items for cycling given");
      return args.positional[index % args.positional.size()];
    };
    entries.emplace_back("cycle", CallablePtr(std::move(cycle)));
    auto changed = std::make_shared<Callable>();
    changed->name = "changed";
    changed->call = [last_changed](CallContext&, CallArgs& args) -> Result<Value> {
      std::optional<std::vector<Value>>& last = *last_changed;
      const bool same = last && last->size() == args.positional.size() &&
                        std::equal(last->begin(), last->end(), args.positional.begin(), equals);
      if (same) return Value(false);
      last = args.positional;
      return Value(true);
    };
    entries.emplace_back("changed", CallablePtr(std::move(changed)));
    return Value::dict(std::move(entries));
  }

  Status exec_for(const Node& node, Scope& scope) {
    KVTIER_ASSIGN_OR_RETURN(std::vector<Value> items, loop_items(node, scope));
    Flow flow = Flow::kNormal;
    if (items.empty()) return exec_body(node.else_body, scope, flow);
    const auto last_changed = std::make_shared<std::optional<std::vector<Value>>>();
    for (size_t index = 0; index < items.size(); ++index) {
      KVTIER_RETURN_IF_ERROR(charge(1));
      Scope iteration{&scope, {}};
      KVTIER_RETURN_IF_ERROR(bind_targets(node.targets, items[index], iteration, node.line));
      iteration.variables["loop"] = loop_object(items, index, last_changed);
      flow = Flow::kNormal;
      KVTIER_RETURN_IF_ERROR(exec_body(node.body, iteration, flow));
      if (flow == Flow::kBreak) break;
    }
    return Status::Ok();
  }

  // A macro sees the variables of the scopes it is defined in, as jinja2's closures do (a loop's
  // variable, an outer macro's arguments: they read as empty before), copied as they are then; the
  // template's top level it reads as it is when called.
  using Closure = std::unordered_map<std::string, Value>;
  Value make_macro(const Node& node, const Scope& scope) {
    auto closure = std::make_shared<Closure>();
    for (const Scope* s = &scope; s != nullptr && s != &root_; s = s->parent)
      for (const auto& [name, value] : s->variables) closure->emplace(name, value);  // the nearer ones first
    auto macro = std::make_shared<Callable>();
    macro->name = node.name;
    macro->is_macro = true;
    const Node* definition = &node;
    macro->call = [this, definition, closure = std::shared_ptr<const Closure>(std::move(closure))](CallContext&,
                                                                                                  CallArgs& args) {
      return call_macro(*definition, *closure, args);
    };
    return CallablePtr(std::move(macro));
  }

  Result<Value> call_macro(const Node& macro, const Closure& closure, CallArgs& args) {
    if (args.positional.size() > macro.params.size()) {
      return render_error(macro.line, "macro '" + macro.name + "' takes not more than " +
                                          std::to_string(macro.params.size()) + " argument(s)");
    }
    const Scope defined{&root_, closure};
    Scope frame{&defined, {}};
    for (size_t i = 0; i < args.positional.size(); ++i) frame.variables[macro.params[i].name] = args.positional[i];
    for (auto& [name, value] : args.keyword) {
      bool known = false;
      for (const MacroParam& param : macro.params) known = known || param.name == name;
      if (!known || frame.variables.count(name) != 0) {
        return render_error(macro.line, "macro '" + macro.name + "' takes no keyword argument '" + name + "'");
      }
      frame.variables[name] = value;
    }
    for (const MacroParam& param : macro.params) {
      if (frame.variables.count(param.name) != 0) continue;
      if (param.default_value) {
        KVTIER_ASSIGN_OR_RETURN(frame.variables[param.name], eval(*param.default_value, frame));
      } else {
        frame.variables[param.name] = Value::undefined("parameter '" + param.name + "' was not provided");
      }
    }
    Flow flow = Flow::kNormal;  // the parser allows no break or continue outside a loop of the macro's own
    KVTIER_ASSIGN_OR_RETURN(std::string text, capture(macro.body, frame, flow));
    return Value(std::move(text));
  }

  // ---- expressions ----
  const Value* lookup(const std::string& name, const Scope& scope) const {
    if (const Value* value = scope.find(name)) return value;
    if (const Value* value = context_.as_dict().find(name)) return value;
    return find_global(name);
  }

  Result<Value> eval(const Expr& expr, Scope& scope) {
    if (++depth_ > limits_.max_depth) return render_error(expr.line, "expression nested too deeply");
    auto result = eval_inner(expr, scope);
    --depth_;
    // A string costs a step per KiB, built or copied, and a list or dict a step per 256 items: a
    // statement that works on long strings or lists (`x in big`, with a million items, 700,000
    // times: 20 minutes) is not one step.
    if (result.ok() && result->is_string()) KVTIER_RETURN_IF_ERROR(charge(result->as_string().size() / 1024));
    if (result.ok() && result->is_list()) KVTIER_RETURN_IF_ERROR(charge(result->as_list().items.size() / 256));
    if (result.ok() && result->is_dict()) KVTIER_RETURN_IF_ERROR(charge(result->as_dict().entries.size() / 256));
    return result;
  }

  Result<CallArgs> eval_args(const Expr& expr, Scope& scope, size_t first) {
    CallArgs args;
    for (size_t i = first; i < expr.args.size(); ++i) {
      KVTIER_ASSIGN_OR_RETURN(Value value, eval(*expr.args[i], scope));
      args.positional.push_back(std::move(value));
    }
    for (const auto& [name, value_expr] : expr.keywords) {
      KVTIER_ASSIGN_OR_RETURN(Value value, eval(*value_expr, scope));
      args.keyword.emplace_back(name, std::move(value));
    }
    return args;
  }

  Result<Value> eval_collection(const Expr& expr, Scope& scope) {
    KVTIER_RETURN_IF_ERROR(check_items(expr.args.size()));
    if (expr.kind == Expr::Kind::kDict) {
      std::vector<std::pair<std::string, Value>> entries;
      for (size_t i = 0; i + 1 < expr.args.size(); i += 2) {
        KVTIER_ASSIGN_OR_RETURN(Value key, eval(*expr.args[i], scope));
        if (!key.is_string()) return render_error(expr.line, "dict keys must be strings");
        KVTIER_ASSIGN_OR_RETURN(Value value, eval(*expr.args[i + 1], scope));
        bool replaced = false;
        for (auto& entry : entries) {
          if (entry.first == key.as_string()) entry.second = value, replaced = true;
        }
        if (!replaced) entries.emplace_back(key.as_string(), std::move(value));
      }
      return Value::dict(std::move(entries));
    }
    std::vector<Value> items;
    for (const ExprPtr& item : expr.args) {
      KVTIER_ASSIGN_OR_RETURN(Value value, eval(*item, scope));
      items.push_back(std::move(value));
    }
    return Value::list(std::move(items), expr.kind == Expr::Kind::kTuple);
  }

  Result<Value> eval_call(const Expr& expr, Scope& scope) {
    KVTIER_ASSIGN_OR_RETURN(Value callee, eval(*expr.args[0], scope));
    KVTIER_ASSIGN_OR_RETURN(CallArgs args, eval_args(expr, scope, 1));
    return call(callee, args);
  }

  Result<Value> eval_inner(const Expr& expr, Scope& scope) {
    using Kind = Expr::Kind;
    switch (expr.kind) {
      case Kind::kLiteral: return expr.literal;
      case Kind::kName: {
        const Value* value = lookup(expr.name, scope);
        return value != nullptr ? *value : Value::undefined("'" + expr.name + "' is undefined");
      }
      case Kind::kList:
      case Kind::kTuple:
      case Kind::kDict: return eval_collection(expr, scope);
      case Kind::kAttribute: {
        KVTIER_ASSIGN_OR_RETURN(Value object, eval(*expr.args[0], scope));
        return get_attribute(object, expr.name);
      }
      case Kind::kIndex: {
        KVTIER_ASSIGN_OR_RETURN(Value object, eval(*expr.args[0], scope));
        KVTIER_ASSIGN_OR_RETURN(Value key, eval(*expr.args[1], scope));
        return get_item(object, key);
      }
      case Kind::kSlice: {
        Value parts[4];
        for (size_t i = 0; i < 4; ++i) {
          if (!expr.args[i]) continue;
          KVTIER_ASSIGN_OR_RETURN(parts[i], eval(*expr.args[i], scope));
        }
        return get_slice(parts[0], parts[1], parts[2], parts[3]);
      }
      case Kind::kCall: return eval_call(expr, scope);
      case Kind::kFilter:
      case Kind::kTest: {
        KVTIER_ASSIGN_OR_RETURN(Value subject, eval(*expr.args[0], scope));
        KVTIER_ASSIGN_OR_RETURN(CallArgs args, eval_args(expr, scope, 1));
        if (expr.kind == Kind::kFilter) return apply_filter(*this, expr.name, subject, args);
        KVTIER_ASSIGN_OR_RETURN(bool passed, apply_test(*this, expr.name, subject, args));
        return Value(passed != expr.negated);
      }
      default: return eval_operator(expr, scope);
    }
  }

  Result<Value> eval_operator(const Expr& expr, Scope& scope) {
    using Kind = Expr::Kind;
    KVTIER_ASSIGN_OR_RETURN(Value first, eval(*expr.args[0], scope));
    switch (expr.kind) {
      case Kind::kUnary:
        if (expr.name == "not") return Value(!first.truthy());
        return unary_operator(expr.name, first);
      case Kind::kAnd:
        if (!first.truthy()) return first;
        return eval(*expr.args[1], scope);
      case Kind::kOr:
        if (first.truthy()) return first;
        return eval(*expr.args[1], scope);
      case Kind::kConditional:
        if (first.truthy()) return eval(*expr.args[1], scope);
        if (!expr.args[2]) return Value::undefined("the inline if expression evaluated to false");
        return eval(*expr.args[2], scope);
      case Kind::kBinary: {
        KVTIER_ASSIGN_OR_RETURN(Value second, eval(*expr.args[1], scope));
        return binary_operator(*this, expr.name, first, second);
      }
      case Kind::kCompareChain: {
        Value lhs = std::move(first), result;
        for (size_t i = 0; i < expr.ops.size(); ++i) {
          KVTIER_ASSIGN_OR_RETURN(Value rhs, eval(*expr.args[i + 1], scope));
          KVTIER_ASSIGN_OR_RETURN(result, binary_operator(*this, expr.ops[i], lhs, rhs));
          if (!result.truthy()) return result;
          lhs = std::move(rhs);
        }
        return result;
      }
      default: return render_error(expr.line, "unknown expression");
    }
  }

  const Value& context_;
  const RenderLimits& limits_;
  Scope root_;
  std::string* out_ = nullptr;
  std::deque<std::unique_ptr<Namespace>> namespaces_;
  uint64_t steps_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<std::string> render_template(const Body& body, const Value& context, const RenderLimits& limits) {
  if (!context.is_dict()) return Status::InvalidArgument("jinja: the render context must be an object");
  Renderer renderer(context, limits);
  return renderer.run(body);
}

}  // namespace kvtier::text::jinja
