// The chat-template evaluator: one Renderer per render() call, walking the
// syntax tree. Its members are spread by concern: render.cc (entry point and
// statements), render_expressions.cc, render_calls.cc (globals, macros and
// methods) and render_filters.cc (filters and tests); value_ops.h holds the
// Python semantics of values they share.
//
// Evaluator of the chat-template subset of Jinja2: statements, expressions
// with Python's semantics, and the filters, tests, methods and globals that
// published chat templates use. Semantics follow Jinja2 3.1 in the sandbox
// Hugging Face renders with (ImmutableSandboxedEnvironment, default
// Undefined): a missing key or attribute is undefined, printing undefined
// gives "", using it in arithmetic or taking its attribute is an error,
// lists and dicts cannot be mutated, and namespaces can.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/status.h"
#include "chat/jinja.h"
#include "chat/value_ops.h"

namespace sustain::chat::jinja {

// Evaluation recursion (statements, expressions, macro calls together) and
// the native stack it may use: well inside a thread's default 8 MiB, also
// with sanitizers, whose frames are several times larger.
inline constexpr int kMaxRecursion = 2000;
inline constexpr uintptr_t kMaxStackBytes = 2u << 20;

[[gnu::always_inline]] inline uintptr_t stack_position() {
  return reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
}

// Call arguments, with Python-style lookup by position or keyword.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* get(size_t i, const char* name) const {
    if (i < pos.size()) return &pos[i];
    for (const auto& [k, v] : kw)
      if (k == name) return &v;
    return nullptr;
  }
};

class Renderer {
 public:
  Renderer(const Template& t, const Value& context) : t_(t), lim_(t.limits) {
    if (context.kind == Kind::kDict)
      for (const auto& [k, v] : context.dict->items) globals_.set(k, v);
    for (const char* name : {"range", "namespace", "raise_exception", "strftime_now", "dict"}) {
      if (globals_.find(name)) continue;
      Callable c;
      c.type = Callable::kBuiltin;
      c.name = name;
      globals_.set(name, Value::callable(std::move(c)));
    }
    top_.parent = &globals_;
    cur_ = &top_;
  }

  Expected<std::string> run() {
    stack_base_ = stack_position();
    std::string out;
    out_ = &out;
    SUSTAIN_TRY(exec_body(t_.body));
    return out;
  }

 private:
  // Scopes hold a handful of names each; a flat vector beats a hash map,
  // and a loop makes one per iteration.
  struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
    Frame* parent = nullptr;
    const Value* find(const std::string& name) const {
      for (const auto& kv : vars)
        if (kv.first == name) return &kv.second;
      return nullptr;
    }
    void set(const std::string& name, Value v) {
      for (auto& kv : vars)
        if (kv.first == name) {
          kv.second = std::move(v);
          return;
        }
      vars.emplace_back(name, std::move(v));
    }
  };
  enum class Flow { kNormal, kBreak, kContinue };

  struct Depth {
    int& d;
    explicit Depth(int& depth) : d(depth) { ++d; }
    ~Depth() { --d; }
  };

  template <typename... A>
  Status fail(const Node& n, fmt::format_string<A...> f, A&&... args) const {
    return error(Code::kInvalidArgument, "line {}, column {}: {}", n.line, n.col,
                 fmt::format(f, std::forward<A>(args)...));
  }

  Status step(const Node& n) {
    if (++steps_ > lim_.max_steps)
      return fail(n, "template exceeded the step limit of {} (a runaway loop?)", lim_.max_steps);
    if (recursion_ > kMaxRecursion)
      return fail(n, "template recursion deeper than {}", kMaxRecursion);
    uintptr_t here = stack_position();
    uintptr_t used = here < stack_base_ ? stack_base_ - here : here - stack_base_;
    if (used > kMaxStackBytes)
      return fail(n, "template recursion deeper than the {} KiB stack budget",
                  kMaxStackBytes >> 10);
    return Status::ok();
  }
  // Copying big strings and lists costs steps too, so quadratic growth in a
  // loop runs into the step limit instead of hanging.
  Status charge(const Node& n, size_t bytes) {
    steps_ += static_cast<int64_t>(bytes / 256);
    if (bytes > lim_.max_output_bytes)
      return fail(n, "a value of {} bytes exceeds the output limit of {} bytes", bytes,
                  lim_.max_output_bytes);
    return step(n);
  }
  Status check_depth(const Node& n, const Value& v) {
    if (v.depth > kMaxValueDepth)
      return fail(n, "value nested deeper than {} levels", kMaxValueDepth);
    return Status::ok();
  }

  Status emit(const Node& n, const std::string& s) {
    if (out_->size() + s.size() > lim_.max_output_bytes)
      return fail(n, "rendered text exceeds the output limit of {} bytes", lim_.max_output_bytes);
    out_->append(s);
    return Status::ok();
  }

  Value lookup(const std::string& name) const {
    for (const Frame* f = cur_; f; f = f->parent)
      if (const Value* v = f->find(name)) return *v;
    return Value::undefined(fmt::format("'{}' is undefined", name));
  }

  // ---- statements ----

  Status exec_body(const Body& body);
  Status exec(const Node& n);
  [[gnu::noinline]] Status exec_output(const Node& n);
  [[gnu::noinline]] Status exec_if(const Node& n);
  [[gnu::noinline]] Status exec_define(const Node& n);
  Status assign_targets(const Node& n, const std::vector<std::string>& names, const Value& v,
                        Frame& frame);
  [[gnu::noinline]] Status exec_for(const Node& n);
  [[gnu::noinline]] Status exec_set(const Node& n);
  Expected<std::vector<Value>> iterate(const Node& n, const Value& v);

  // ---- expressions ----

  // eval() recurses through every expression, so each case with locals of
  // its own lives in a separate function: eval's frame stays small.
  Expected<Value> eval(const Node& n);
  [[gnu::noinline]] Expected<Value> eval_access(const Node& n);
  [[gnu::noinline]] Expected<Value> eval_call(const Node& n);
  [[gnu::noinline]] Expected<Value> eval_unary(const Node& n);
  [[gnu::noinline]] Expected<Value> eval_compare(const Node& n);
  [[gnu::noinline]] Expected<Value> eval_cond(const Node& n);
  [[gnu::noinline]] Expected<Value> eval_literal(const Node& n);
  Expected<Args> eval_args(const Node& n, size_t first);
  static bool is_method(Kind k, const std::string& name);
  static Value bound(const Value& self, const std::string& name);

  // obj.name: Python attributes (methods) first, then the item.
  Expected<Value> get_attr(const Node& n, const Value& obj, const std::string& name);

  // obj[key]: the item first, then (for a string key) the attribute.
  Expected<Value> get_item(const Node& n, const Value& obj, const Value& key);
  [[gnu::noinline]] Expected<Value> eval_slice(const Node& n);
  [[gnu::noinline]] Expected<Value> eval_binary(const Node& n);
  Expected<Value> repeat(const Node& n, const Value& v, int64_t times);
  Expected<Value> arith(const Node& n, const std::string& op, const Value& a, const Value& b);
  Expected<bool> compare(const Node& n, const std::string& op, const Value& a, const Value& b);
  Expected<int> order(const Node& n, const std::string& op, const Value& a, const Value& b);
  Expected<bool> contains(const Node& n, const Value& container, const Value& item);

  // ---- calls ----

  Status check_args(const Node& n, const char* what, const Args& a, size_t max_pos,
                    std::initializer_list<const char*> names);
  Expected<std::string> need_str(const Node& n, const char* what, const Value* v);
  Expected<Value> call(const Node& n, const Value& fn, const Args& a);
  Expected<Value> call_macro(const Node& n, const Callable& c, const Args& a);
  Expected<Value> call_builtin(const Node& n, const std::string& name, const Args& a);
  Expected<Value> call_method(const Node& n, const Value& self, const std::string& name,
                              const Args& a);
  Expected<Value> call_str_method(const Node& n, const std::string& s, const std::string& name,
                                  const std::string& what, const Args& a);

  // ---- filters ----

  Expected<Value> attr_path(const Node& n, const Value& v, const std::string& path);
  Expected<Value> filter(const Node& n, const std::string& name, const Value& in, const Args& a);
  Expected<Value> tojson(const Node& n, const Value& in, const Args& a);
  Expected<Value> filter_map(const Node& n, const Value& in, const Args& a);
  Expected<Value> filter_select(const Node& n, const std::string& name, const Value& in,
                                const Args& a);
  Expected<Value> filter_seq(const Node& n, const std::string& name, const Value& in,
                             const Args& a);

  // ---- tests ----

  Expected<bool> test(const Node& n, const std::string& name, const Value& v, const Args& a);

  const Template& t_;
  ChatTemplateLimits lim_;
  Frame globals_, top_;
  Frame* cur_ = nullptr;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  uintptr_t stack_base_ = 0;
  int recursion_ = 0;
  int macro_depth_ = 0;
  Flow flow_ = Flow::kNormal;
};

}  // namespace sustain::chat::jinja
