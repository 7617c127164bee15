// Evaluator of the chat-template subset of Jinja2: statements, expressions
// with Python's semantics, and the filters, tests, methods and globals that
// published chat templates use. Semantics follow Jinja2 3.1 in the sandbox
// Hugging Face renders with (ImmutableSandboxedEnvironment, default
// Undefined): a missing key or attribute is undefined, printing undefined
// gives "", using it in arithmetic or taking its attribute is an error,
// lists and dicts cannot be mutated, and namespaces can.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <string>

#include "tokenizer/chat_template_internal.h"

namespace sustain::tokenizer::jinja {
namespace {

// Evaluation recursion (statements, expressions, macro calls together) and
// the native stack it may use: well inside a thread's default 8 MiB, also
// with sanitizers, whose frames are several times larger.
constexpr int kMaxRecursion = 2000;
constexpr uintptr_t kMaxStackBytes = 2u << 20;

uintptr_t stack_position() {
  return reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return v.b;
    case Kind::kInt:
      return v.i != 0;
    case Kind::kFloat:
      return v.f != 0;
    case Kind::kString:
      return !v.str().empty();
    case Kind::kList:
      return !v.list->empty();
    case Kind::kDict:
      return !v.dict->items.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

bool is_number(const Value& v) {
  return v.kind == Kind::kInt || v.kind == Kind::kFloat || v.kind == Kind::kBool;
}
bool is_intlike(const Value& v) {
  return v.kind == Kind::kInt || v.kind == Kind::kBool;
}
int64_t as_int(const Value& v) {
  return v.kind == Kind::kBool ? (v.b ? 1 : 0) : v.i;
}
double as_float(const Value& v) {
  return v.kind == Kind::kFloat ? v.f : static_cast<double>(as_int(v));
}

bool equal(const Value& a, const Value& b) {
  if (is_number(a) && is_number(b)) {
    if (is_intlike(a) && is_intlike(b)) return as_int(a) == as_int(b);
    return as_float(a) == as_float(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.str() == b.str();
    case Kind::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i)
        if (!equal((*a.list)[i], (*b.list)[i])) return false;
      return true;
    case Kind::kDict:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* o = b.dict->find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    case Kind::kNamespace:
      return a.dict == b.dict;
    case Kind::kCallable:
      return a.fn == b.fn;
    default:
      return false;
  }
}

bool contains_namespace(const Value& v) {
  if (v.kind == Kind::kNamespace) return true;
  if (v.kind == Kind::kList)
    for (const auto& x : *v.list)
      if (contains_namespace(x)) return true;
  if (v.kind == Kind::kDict)
    for (const auto& kv : v.dict->items)
      if (contains_namespace(kv.second)) return true;
  return false;
}

// Unicode-aware where text:: maps the script (see chat_template_internal.h).
std::string lower_text(const std::string& s) {
  return text::lower(s);
}
std::string upper_text(const std::string& s) {
  return text::upper(s);
}
bool is_alpha(uint32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}

// Python's str.capitalize: the first character upper-cased, the rest lower.
std::string capitalize(const std::string& s) {
  auto cps = text::to_cps(s);
  for (size_t i = 0; i < cps.size(); ++i)
    cps[i] = i == 0 ? text::to_upper(cps[i]) : text::to_lower(cps[i]);
  return text::from_cps(cps.data(), cps.data() + cps.size());
}

// Python's str.islower / str.isupper: some cased letter, none of the other case.
bool is_lower_text(const std::string& s) {
  bool cased = false;
  for (uint32_t c : text::to_cps(s)) {
    if (text::to_lower(c) != c) return false;
    cased = cased || text::is_cased_letter(c);
  }
  return cased;
}
bool is_upper_text(const std::string& s) {
  bool cased = false;
  for (uint32_t c : text::to_cps(s)) {
    if (text::to_upper(c) != c || c == 0xDF) return false;
    cased = cased || text::is_cased_letter(c);
  }
  return cased;
}

// Jinja's `title` filter (not str.title): words start after whitespace or
// one of - ( { [ <; each word's first character upper-cased, the rest lower.
std::string title_filter(const std::string& s) {
  auto cps = text::to_cps(s);
  bool start = true;
  for (auto& c : cps) {
    bool sep = text::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      start = true;
      continue;
    }
    c = start ? text::to_upper(c) : text::to_lower(c);
    start = false;
  }
  return text::from_cps(cps.data(), cps.data() + cps.size());
}

// Python's str.title: a cased letter after an uncased character starts a word.
std::string title_case(const std::string& s) {
  auto cps = text::to_cps(s);
  bool prev_cased = false;
  for (auto& c : cps) {
    bool cased = text::is_cased_letter(c);
    if (cased) c = prev_cased ? text::to_lower(c) : text::to_upper(c);
    prev_cased = cased;
  }
  return text::from_cps(cps.data(), cps.data() + cps.size());
}

// Python's str.strip family; chars == nullptr strips whitespace.
std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  auto cps = text::to_cps(s);
  std::vector<uint32_t> set;
  bool ws = chars == nullptr || chars->kind == Kind::kNone;
  if (!ws) set = text::to_cps(chars->str());
  auto strip_cp = [&](uint32_t c) {
    return ws ? text::is_space(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_cp(cps[b])) ++b;
  if (right)
    while (e > b && strip_cp(cps[e - 1])) --e;
  return text::from_cps(cps.data() + b, cps.data() + e);
}

std::vector<std::string> split_ws(const std::string& s, int64_t maxsplit) {
  auto cps = text::to_cps(s);
  std::vector<std::string> out;
  size_t i = 0;
  while (true) {
    while (i < cps.size() && text::is_space(cps[i])) ++i;
    if (i >= cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      size_t e = cps.size();
      while (e > i && text::is_space(cps[e - 1])) --e;
      out.push_back(text::from_cps(cps.data() + i, cps.data() + e));
      break;
    }
    size_t b = i;
    while (i < cps.size() && !text::is_space(cps[i])) ++i;
    out.push_back(text::from_cps(cps.data() + b, cps.data() + i));
  }
  return out;
}

std::vector<std::string> split_sep(const std::string& s, const std::string& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t f = s.find(sep, pos);
    if (f == std::string::npos) break;
    out.push_back(s.substr(pos, f - pos));
    pos = f + sep.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count) {
  if (from.empty()) {
    // Python inserts `to` between code points (and at both ends).
    auto cps = text::to_cps(s);
    std::string out;
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < cps.size()) out += text::from_cps(&cps[i], &cps[i] + 1);
    }
    return out;
  }
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(from, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += to;
    pos = f + from.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

// Python slice indices for a sequence of length n.
std::vector<size_t> slice_indices(int64_t n, const Value* start, const Value* stop, int64_t step) {
  auto norm = [&](const Value* v, int64_t def, bool is_start) -> int64_t {
    if (!v || v->kind == Kind::kNone) return def;
    int64_t x = as_int(*v);
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    (void)is_start;
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  std::vector<size_t> idx;
  if (step > 0) {
    int64_t b = norm(start, 0, true), e = norm(stop, n, false);
    for (int64_t i = b; i < e; i += step) idx.push_back(static_cast<size_t>(i));
  } else {
    int64_t b = norm(start, n - 1, true), e = norm(stop, -1, false);
    for (int64_t i = b; i > e; i += step) idx.push_back(static_cast<size_t>(i));
  }
  return idx;
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

  Status exec_body(const Body& body) {
    for (const auto& st : body) {
      SUSTAIN_TRY(exec(*st));
      if (flow_ != Flow::kNormal) break;
    }
    return Status::ok();
  }

  Status exec(const Node& n) {
    Depth d(recursion_);
    SUSTAIN_TRY(step(n));
    switch (n.type) {
      case NodeType::kText:
        return emit(n, n.name);
      case NodeType::kOutput:
        return exec_output(n);
      case NodeType::kIf:
        return exec_if(n);
      case NodeType::kFor:
        return exec_for(n);
      case NodeType::kSet:
        return exec_set(n);
      case NodeType::kSetBlock:
      case NodeType::kMacro:
        return exec_define(n);
      case NodeType::kBreak:
        flow_ = Flow::kBreak;
        return Status::ok();
      case NodeType::kContinue:
        flow_ = Flow::kContinue;
        return Status::ok();
      case NodeType::kScope:
        return exec_body(n.bodies[0]);
      default:
        return fail(n, "internal error: expression node used as a statement");
    }
  }

  [[gnu::noinline]] Status exec_output(const Node& n) {
    SUSTAIN_ASSIGN_OR_RETURN(auto v, eval(*n.kids[0]));
    if (v.kind == Kind::kString) return emit(n, v.str());
    std::string s;
    append_str(v, s);
    SUSTAIN_TRY(charge(n, s.size()));
    return emit(n, s);
  }

  [[gnu::noinline]] Status exec_if(const Node& n) {
    for (size_t i = 0; i < n.kids.size(); ++i) {
      SUSTAIN_ASSIGN_OR_RETURN(auto c, eval(*n.kids[i]));
      if (truthy(c)) return exec_body(n.bodies[i]);
    }
    if (n.bodies.size() > n.kids.size()) return exec_body(n.bodies.back());
    return Status::ok();
  }

  [[gnu::noinline]] Status exec_define(const Node& n) {
    if (n.type == NodeType::kMacro) {
      Callable c;
      c.type = Callable::kMacro;
      c.name = n.name;
      c.macro = &n;
      cur_->set(n.name, Value::callable(std::move(c)));
      return Status::ok();
    }
    std::string captured;
    std::string* saved = out_;
    out_ = &captured;
    Status st = exec_body(n.bodies[0]);
    out_ = saved;
    SUSTAIN_TRY(st);
    cur_->set(n.name, Value::string(std::move(captured)));
    return Status::ok();
  }

  Status assign_targets(const Node& n, const std::vector<std::string>& names, const Value& v,
                        Frame& frame) {
    if (names.size() == 1) {
      frame.set(names[0], v);
      return Status::ok();
    }
    SUSTAIN_ASSIGN_OR_RETURN(auto items, iterate(n, v));
    if (items.size() != names.size())
      return fail(n, "cannot unpack {} values into {} names", items.size(), names.size());
    for (size_t i = 0; i < names.size(); ++i) frame.set(names[i], items[i]);
    return Status::ok();
  }

  [[gnu::noinline]] Status exec_for(const Node& n) {
    SUSTAIN_ASSIGN_OR_RETURN(auto seq, eval(*n.kids[0]));
    SUSTAIN_ASSIGN_OR_RETURN(auto items, iterate(*n.kids[0], seq));
    Frame* outer = cur_;
    if (n.kids[1]) {  // {% for x in xs if cond %}: loop.* counts the kept items only
      std::vector<Value> kept;
      for (const auto& item : items) {
        Frame f;
        f.parent = outer;
        SUSTAIN_TRY(assign_targets(n, n.names, item, f));
        cur_ = &f;
        auto c = eval(*n.kids[1]);
        cur_ = outer;
        if (!c) return c.status();
        if (truthy(*c)) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      SUSTAIN_TRY(step(n));
      Frame f;
      f.parent = outer;
      SUSTAIN_TRY(assign_targets(n, n.names, items[static_cast<size_t>(i)], f));
      if (n.flag) {  // only built when the body reads it: a dozen allocations per item
        Dict loop;
        loop.set("index", Value::integer(i + 1));
        loop.set("index0", Value::integer(i));
        loop.set("revindex", Value::integer(len - i));
        loop.set("revindex0", Value::integer(len - i - 1));
        loop.set("first", Value::boolean(i == 0));
        loop.set("last", Value::boolean(i == len - 1));
        loop.set("length", Value::integer(len));
        loop.set("depth", Value::integer(1));
        loop.set("depth0", Value::integer(0));
        if (i > 0) loop.set("previtem", items[static_cast<size_t>(i - 1)]);
        if (i + 1 < len) loop.set("nextitem", items[static_cast<size_t>(i + 1)]);
        f.set("loop", Value::make_dict(std::move(loop)));
      }
      cur_ = &f;
      Status st = exec_body(n.bodies[0]);
      cur_ = outer;
      SUSTAIN_TRY(st);
      Flow fl = flow_;
      flow_ = Flow::kNormal;
      if (fl == Flow::kBreak) break;
    }
    if (len == 0 && n.bodies.size() > 1) return exec_body(n.bodies[1]);
    return Status::ok();
  }

  [[gnu::noinline]] Status exec_set(const Node& n) {
    SUSTAIN_ASSIGN_OR_RETURN(auto v, eval(*n.kids[0]));
    if (!n.name2.empty()) {
      Value target = lookup(n.name);
      if (target.kind != Kind::kNamespace)
        return fail(n,
                    "cannot assign attribute '{}' on '{}' ({}): only namespace() objects "
                    "can be assigned to",
                    n.name2, n.name, type_name(target));
      if (contains_namespace(v)) return fail(n, "a namespace cannot be stored inside a namespace");
      if (v.depth + 1 > kMaxValueDepth)
        return fail(n, "value nested deeper than {} levels", kMaxValueDepth);
      target.dict->set(n.name2, std::move(v));
      return Status::ok();
    }
    if (!n.names.empty()) return assign_targets(n, n.names, v, *cur_);
    cur_->set(n.name, std::move(v));
    return Status::ok();
  }

  Expected<std::vector<Value>> iterate(const Node& n, const Value& v) {
    switch (v.kind) {
      case Kind::kUndefined:
        return std::vector<Value>{};
      case Kind::kList:
        return *v.list;
      case Kind::kDict: {
        std::vector<Value> keys;
        for (const auto& kv : v.dict->items) keys.push_back(Value::string(kv.first));
        return keys;
      }
      case Kind::kString: {
        std::vector<Value> chars;
        auto cps = text::to_cps(v.str());
        for (size_t i = 0; i < cps.size(); ++i)
          chars.push_back(Value::string(text::from_cps(&cps[i], &cps[i] + 1)));
        return chars;
      }
      default:
        return fail(n, "'{}' object is not iterable", type_name(v));
    }
  }

  // ---- expressions ----

  // eval() recurses through every expression, so each case with locals of
  // its own lives in a separate function: eval's frame stays small.
  Expected<Value> eval(const Node& n) {
    Depth d(recursion_);
    SUSTAIN_TRY(step(n));
    switch (n.type) {
      case NodeType::kLiteral:
        return n.value;
      case NodeType::kName:
        return lookup(n.name);
      case NodeType::kGetAttr:
      case NodeType::kGetItem:
        return eval_access(n);
      case NodeType::kSlice:
        return eval_slice(n);
      case NodeType::kCall:
      case NodeType::kFilter:
      case NodeType::kTest:
        return eval_call(n);
      case NodeType::kUnary:
        return eval_unary(n);
      case NodeType::kBinary:
        return eval_binary(n);
      case NodeType::kCompare:
        return eval_compare(n);
      case NodeType::kCondExpr:
        return eval_cond(n);
      case NodeType::kListLit:
      case NodeType::kDictLit:
        return eval_literal(n);
      default:
        return fail(n, "internal error: statement node used as an expression");
    }
  }

  [[gnu::noinline]] Expected<Value> eval_access(const Node& n) {
    SUSTAIN_ASSIGN_OR_RETURN(auto obj, eval(*n.kids[0]));
    if (n.type == NodeType::kGetAttr) return get_attr(n, obj, n.name);
    SUSTAIN_ASSIGN_OR_RETURN(auto key, eval(*n.kids[1]));
    return get_item(n, obj, key);
  }

  [[gnu::noinline]] Expected<Value> eval_call(const Node& n) {
    SUSTAIN_ASSIGN_OR_RETURN(auto head, eval(*n.kids[0]));
    SUSTAIN_ASSIGN_OR_RETURN(auto args, eval_args(n, 1));
    if (n.type == NodeType::kCall) return call(n, head, args);
    if (n.type == NodeType::kFilter) return filter(n, n.name, head, args);
    SUSTAIN_ASSIGN_OR_RETURN(bool r, test(n, n.name, head, args));
    return Value::boolean(r != n.flag);
  }

  [[gnu::noinline]] Expected<Value> eval_unary(const Node& n) {
    SUSTAIN_ASSIGN_OR_RETURN(auto v, eval(*n.kids[0]));
    if (n.name == "not") return Value::boolean(!truthy(v));
    if (v.kind == Kind::kUndefined) return fail(n, "{}", v.str());
    if (!is_number(v)) return fail(n, "bad operand type for unary {}: '{}'", n.name, type_name(v));
    if (n.name == "+") return is_intlike(v) ? Value::integer(as_int(v)) : v;
    if (is_intlike(v)) {
      if (as_int(v) == INT64_MIN) return fail(n, "integer overflow");
      return Value::integer(-as_int(v));
    }
    return Value::number(-v.f);
  }

  [[gnu::noinline]] Expected<Value> eval_compare(const Node& n) {
    SUSTAIN_ASSIGN_OR_RETURN(auto left, eval(*n.kids[0]));
    for (size_t i = 1; i < n.kids.size(); ++i) {
      SUSTAIN_ASSIGN_OR_RETURN(auto right, eval(*n.kids[i]));
      SUSTAIN_ASSIGN_OR_RETURN(bool r, compare(n, n.names[i - 1], left, right));
      if (!r) return Value::boolean(false);
      left = std::move(right);
    }
    return Value::boolean(true);
  }

  [[gnu::noinline]] Expected<Value> eval_cond(const Node& n) {
    SUSTAIN_ASSIGN_OR_RETURN(auto c, eval(*n.kids[1]));
    if (truthy(c)) return eval(*n.kids[0]);
    if (n.kids[2]) return eval(*n.kids[2]);
    return Value::undefined("the inline if expression has no else branch");
  }

  [[gnu::noinline]] Expected<Value> eval_literal(const Node& n) {
    if (n.type == NodeType::kListLit) {
      List items;
      for (const auto& k : n.kids) {
        SUSTAIN_ASSIGN_OR_RETURN(auto v, eval(*k));
        items.push_back(std::move(v));
      }
      Value v = n.flag ? Value::make_tuple(std::move(items)) : Value::make_list(std::move(items));
      SUSTAIN_TRY(check_depth(n, v));
      return v;
    }
    Dict dict;
    for (size_t i = 0; i + 1 < n.kids.size(); i += 2) {
      SUSTAIN_ASSIGN_OR_RETURN(auto k, eval(*n.kids[i]));
      SUSTAIN_ASSIGN_OR_RETURN(auto v, eval(*n.kids[i + 1]));
      if (k.kind != Kind::kString)
        return fail(n, "dict keys must be strings here, not {}", type_name(k));
      dict.set(k.str(), std::move(v));
    }
    Value v = Value::make_dict(std::move(dict));
    SUSTAIN_TRY(check_depth(n, v));
    return v;
  }

  Expected<Args> eval_args(const Node& n, size_t first) {
    Args a;
    for (size_t i = first; i < n.kids.size(); ++i) {
      SUSTAIN_ASSIGN_OR_RETURN(auto v, eval(*n.kids[i]));
      a.pos.push_back(std::move(v));
    }
    for (const auto& [k, e] : n.kwargs) {
      SUSTAIN_ASSIGN_OR_RETURN(auto v, eval(*e));
      a.kw.emplace_back(k, std::move(v));
    }
    return a;
  }

  static bool is_method(Kind k, const std::string& name) {
    static const char* kStr[] = {"startswith", "endswith", "strip",   "lstrip",     "rstrip",
                                 "split",      "rsplit",   "upper",   "lower",      "title",
                                 "capitalize", "replace",  "find",    "rfind",      "count",
                                 "join",       "isdigit",  "isalpha", "isalnum",    "isspace",
                                 "isupper",    "islower",  "format",  "splitlines", "index"};
    static const char* kDict[] = {"items", "keys",   "values", "get",        "copy",
                                  "pop",   "update", "clear",  "setdefault", "popitem"};
    static const char* kList[] = {"count", "index",  "copy",    "append", "extend", "insert",
                                  "pop",   "remove", "reverse", "sort",   "clear"};
    auto in = [&](const auto& arr) {
      for (const char* m : arr)
        if (name == m) return true;
      return false;
    };
    if (k == Kind::kString) return in(kStr);
    if (k == Kind::kDict) return in(kDict);
    if (k == Kind::kList) return in(kList);
    return false;
  }

  static Value bound(const Value& self, const std::string& name) {
    Callable c;
    c.type = Callable::kMethod;
    c.name = name;
    c.self = std::make_shared<const Value>(self);
    return Value::callable(std::move(c));
  }

  // obj.name: Python attributes (methods) first, then the item.
  Expected<Value> get_attr(const Node& n, const Value& obj, const std::string& name) {
    if (obj.kind == Kind::kUndefined) return fail(n, "{}", obj.str());
    if (is_method(obj.kind, name)) return bound(obj, name);
    if (obj.kind == Kind::kDict || obj.kind == Kind::kNamespace) {
      if (const Value* v = obj.dict->find(name)) return *v;
    }
    return Value::undefined(fmt::format("'{}' has no attribute '{}'", type_name(obj), name));
  }

  // obj[key]: the item first, then (for a string key) the attribute.
  Expected<Value> get_item(const Node& n, const Value& obj, const Value& key) {
    if (obj.kind == Kind::kUndefined) return fail(n, "{}", obj.str());
    if (obj.kind == Kind::kDict || obj.kind == Kind::kNamespace) {
      if (key.kind == Kind::kString) {
        if (const Value* v = obj.dict->find(key.str())) return *v;
        if (is_method(obj.kind, key.str())) return bound(obj, key.str());
      }
      return Value::undefined(fmt::format("'{}' has no key {}", type_name(obj), [&] {
        std::string s;
        append_repr(key, s);
        return s;
      }()));
    }
    if ((obj.kind == Kind::kList || obj.kind == Kind::kString) && is_intlike(key)) {
      int64_t i = as_int(key);
      if (obj.kind == Kind::kList) {
        int64_t len = static_cast<int64_t>(obj.list->size());
        if (i < 0) i += len;
        if (i < 0 || i >= len)
          return Value::undefined(fmt::format("list index {} out of range", as_int(key)));
        return (*obj.list)[static_cast<size_t>(i)];
      }
      auto cps = text::to_cps(obj.str());
      int64_t len = static_cast<int64_t>(cps.size());
      if (i < 0) i += len;
      if (i < 0 || i >= len)
        return Value::undefined(fmt::format("string index {} out of range", as_int(key)));
      return Value::string(
          text::from_cps(&cps[static_cast<size_t>(i)], &cps[static_cast<size_t>(i)] + 1));
    }
    if (key.kind == Kind::kString) return get_attr(n, obj, key.str());
    return Value::undefined(fmt::format("'{}' object is not subscriptable", type_name(obj)));
  }

  [[gnu::noinline]] Expected<Value> eval_slice(const Node& n) {
    SUSTAIN_ASSIGN_OR_RETURN(auto obj, eval(*n.kids[0]));
    Value parts[3];
    for (int k = 0; k < 3; ++k) {
      if (!n.kids[static_cast<size_t>(k) + 1]) {
        parts[k] = Value::none();
        continue;
      }
      SUSTAIN_ASSIGN_OR_RETURN(parts[k], eval(*n.kids[static_cast<size_t>(k) + 1]));
      if (parts[k].kind != Kind::kNone && !is_intlike(parts[k]))
        return fail(n, "slice indices must be integers or none, not {}", type_name(parts[k]));
    }
    int64_t step = parts[2].kind == Kind::kNone ? 1 : as_int(parts[2]);
    if (step == 0) return fail(n, "slice step cannot be zero");
    if (obj.kind == Kind::kUndefined) return fail(n, "{}", obj.str());
    if (obj.kind == Kind::kList) {
      auto idx = slice_indices(static_cast<int64_t>(obj.list->size()), &parts[0], &parts[1], step);
      List out;
      for (size_t i : idx) out.push_back((*obj.list)[i]);
      return Value::make_list(std::move(out));
    }
    if (obj.kind == Kind::kString) {
      auto cps = text::to_cps(obj.str());
      auto idx = slice_indices(static_cast<int64_t>(cps.size()), &parts[0], &parts[1], step);
      std::vector<uint32_t> out;
      for (size_t i : idx) out.push_back(cps[i]);
      return Value::string(text::from_cps(out.data(), out.data() + out.size()));
    }
    return fail(n, "'{}' object cannot be sliced", type_name(obj));
  }

  [[gnu::noinline]] Expected<Value> eval_binary(const Node& n) {
    const std::string& op = n.name;
    SUSTAIN_ASSIGN_OR_RETURN(auto a, eval(*n.kids[0]));
    if (op == "and") {
      if (!truthy(a)) return a;
      return eval(*n.kids[1]);
    }
    if (op == "or") {
      if (truthy(a)) return a;
      return eval(*n.kids[1]);
    }
    SUSTAIN_ASSIGN_OR_RETURN(auto b, eval(*n.kids[1]));
    if (op == "~") {
      std::string s = to_str(a);
      append_str(b, s);
      SUSTAIN_TRY(charge(n, s.size()));
      return Value::string(std::move(s));
    }
    if (a.kind == Kind::kUndefined) return fail(n, "{}", a.str());
    if (b.kind == Kind::kUndefined) return fail(n, "{}", b.str());
    if (is_number(a) && is_number(b)) return arith(n, op, a, b);
    if (op == "+" && a.kind == Kind::kString && b.kind == Kind::kString) {
      SUSTAIN_TRY(charge(n, a.str().size() + b.str().size()));
      return Value::string(a.str() + b.str());
    }
    if (op == "+" && a.kind == Kind::kList && b.kind == Kind::kList) {
      SUSTAIN_TRY(charge(n, (a.list->size() + b.list->size()) * sizeof(Value)));
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::make_list(std::move(out));
    }
    if (op == "*" && (a.kind == Kind::kString || a.kind == Kind::kList) && is_intlike(b))
      return repeat(n, a, as_int(b));
    if (op == "*" && (b.kind == Kind::kString || b.kind == Kind::kList) && is_intlike(a))
      return repeat(n, b, as_int(a));
    if (op == "%" && a.kind == Kind::kString)
      return fail(n, "printf-style string formatting ('%') is not supported");
    return fail(n, "unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a),
                type_name(b));
  }

  Expected<Value> repeat(const Node& n, const Value& v, int64_t times) {
    if (times < 0) times = 0;
    size_t unit = v.kind == Kind::kString ? v.str().size() : v.list->size() * sizeof(Value);
    if (unit != 0 && static_cast<uint64_t>(times) > lim_.max_output_bytes / unit)
      return fail(n, "repetition by {} exceeds the output limit of {} bytes", times,
                  lim_.max_output_bytes);
    SUSTAIN_TRY(charge(n, unit * static_cast<size_t>(times)));
    if (v.kind == Kind::kString) {
      std::string s;
      for (int64_t i = 0; i < times; ++i) s += v.str();
      return Value::string(std::move(s));
    }
    List out;
    for (int64_t i = 0; i < times; ++i) out.insert(out.end(), v.list->begin(), v.list->end());
    return Value::make_list(std::move(out));
  }

  Expected<Value> arith(const Node& n, const std::string& op, const Value& a, const Value& b) {
    if (is_intlike(a) && is_intlike(b) && op != "/") {
      int64_t x = as_int(a), y = as_int(b), r = 0;
      if (op == "+") {
        if (__builtin_add_overflow(x, y, &r)) return fail(n, "integer overflow in +");
      } else if (op == "-") {
        if (__builtin_sub_overflow(x, y, &r)) return fail(n, "integer overflow in -");
      } else if (op == "*") {
        if (__builtin_mul_overflow(x, y, &r)) return fail(n, "integer overflow in *");
      } else if (op == "//" || op == "%") {
        if (y == 0) return fail(n, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) return fail(n, "integer overflow in {}", op);
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        r = op == "//" ? q : m;
      } else if (op == "**") {
        if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
        r = 1;
        for (int64_t i = 0; i < y; ++i) {
          if (__builtin_mul_overflow(r, x, &r)) return fail(n, "integer overflow in **");
          if (r == 0 || r == 1) break;
        }
        if (r == 1 && x == -1 && (y % 2) == 1) r = -1;
      }
      return Value::integer(r);
    }
    double x = as_float(a), y = as_float(b);
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (op == "/") {
      if (y == 0) return fail(n, "division by zero");
      return Value::number(x / y);
    }
    if (op == "//" || op == "%") {
      if (y == 0) return fail(n, "float division or modulo by zero");
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      if (op == "%") return Value::number(m);
      return Value::number(std::floor((x - m) / y + 0.5));
    }
    if (op == "**") return Value::number(std::pow(x, y));
    return fail(n, "unknown operator {}", op);
  }

  Expected<bool> compare(const Node& n, const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "in" || op == "notin") {
      SUSTAIN_ASSIGN_OR_RETURN(bool r, contains(n, b, a));
      return op == "in" ? r : !r;
    }
    if (a.kind == Kind::kUndefined) return fail(n, "{}", a.str());
    if (b.kind == Kind::kUndefined) return fail(n, "{}", b.str());
    int c;
    SUSTAIN_ASSIGN_OR_RETURN(c, order(n, op, a, b));
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
  }

  Expected<int> order(const Node& n, const std::string& op, const Value& a, const Value& b) {
    if (is_number(a) && is_number(b)) {
      if (is_intlike(a) && is_intlike(b)) return as_int(a) < as_int(b) ? -1 : as_int(a) > as_int(b);
      double x = as_float(a), y = as_float(b);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.kind == Kind::kString && b.kind == Kind::kString) {
      int c = a.str().compare(b.str());
      return c < 0 ? -1 : c > 0;
    }
    if (a.kind == Kind::kList && b.kind == Kind::kList) {
      for (size_t i = 0; i < a.list->size() && i < b.list->size(); ++i) {
        if (equal((*a.list)[i], (*b.list)[i])) continue;
        return order(n, op, (*a.list)[i], (*b.list)[i]);
      }
      return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size();
    }
    return fail(n, "'{}' not supported between instances of '{}' and '{}'", op, type_name(a),
                type_name(b));
  }

  Expected<bool> contains(const Node& n, const Value& container, const Value& item) {
    switch (container.kind) {
      case Kind::kUndefined:
        return false;
      case Kind::kString:
        if (item.kind != Kind::kString)
          return fail(n, "'in <string>' requires string as left operand, not {}", type_name(item));
        return container.str().find(item.str()) != std::string::npos;
      case Kind::kList:
        for (const auto& x : *container.list)
          if (equal(x, item)) return true;
        return false;
      case Kind::kDict:
        return item.kind == Kind::kString && container.dict->find(item.str()) != nullptr;
      default:
        return fail(n, "argument of type '{}' is not iterable", type_name(container));
    }
  }

  // ---- calls ----

  Status check_args(const Node& n, const char* what, const Args& a, size_t max_pos,
                    std::initializer_list<const char*> names) {
    if (a.pos.size() > max_pos)
      return fail(n, "{} takes at most {} positional argument(s), got {}", what, max_pos,
                  a.pos.size());
    for (const auto& [k, v] : a.kw) {
      bool ok = false;
      for (const char* nm : names) ok = ok || k == nm;
      if (!ok) return fail(n, "{} got an unexpected keyword argument '{}'", what, k);
    }
    return Status::ok();
  }

  Expected<std::string> need_str(const Node& n, const char* what, const Value* v) {
    if (!v) return fail(n, "{}: missing a string argument", what);
    if (v->kind != Kind::kString)
      return fail(n, "{}: expected a string, got {}", what, type_name(*v));
    return v->str();
  }

  Expected<Value> call(const Node& n, const Value& fn, const Args& a) {
    if (fn.kind == Kind::kUndefined) return fail(n, "{} (called as a function)", fn.str());
    if (fn.kind != Kind::kCallable) return fail(n, "'{}' object is not callable", type_name(fn));
    const Callable& c = *fn.fn;
    if (c.type == Callable::kMacro) return call_macro(n, c, a);
    if (c.type == Callable::kMethod) return call_method(n, *c.self, c.name, a);
    return call_builtin(n, c.name, a);
  }

  Expected<Value> call_macro(const Node& n, const Callable& c, const Args& a) {
    const Node& m = *c.macro;
    if (++macro_depth_ > lim_.max_depth) {
      --macro_depth_;
      return fail(n, "macro calls nested deeper than the limit of {} (in '{}')", lim_.max_depth,
                  m.name);
    }
    struct Restore {
      Renderer& r;
      Frame* cur;
      std::string* out;
      ~Restore() {
        r.cur_ = cur;
        r.out_ = out;
        --r.macro_depth_;
        r.flow_ = Flow::kNormal;
      }
    } restore{*this, cur_, out_};
    if (a.pos.size() > m.names.size())
      return fail(n, "macro '{}' takes not more than {} argument(s), got {}", m.name,
                  m.names.size(), a.pos.size());
    Frame f;
    f.parent = &top_;
    cur_ = &f;
    for (const auto& [k, v] : a.kw)
      if (std::find(m.names.begin(), m.names.end(), k) == m.names.end())
        return fail(n, "macro '{}' has no parameter named '{}'", m.name, k);
    for (size_t i = 0; i < m.names.size(); ++i) {
      const Value* v = a.get(i, m.names[i].c_str());
      if (v) {
        f.set(m.names[i], *v);
      } else if (m.kids[i]) {
        SUSTAIN_ASSIGN_OR_RETURN(auto d, eval(*m.kids[i]));
        f.set(m.names[i], std::move(d));
      } else {
        f.set(m.names[i], Value::undefined(fmt::format("parameter '{}' of macro '{}' was not given",
                                                       m.names[i], m.name)));
      }
    }
    std::string result;
    out_ = &result;
    SUSTAIN_TRY(exec_body(m.bodies[0]));
    return Value::string(std::move(result));
  }

  Expected<Value> call_builtin(const Node& n, const std::string& name, const Args& a) {
    if (name == "raise_exception") {
      std::string msg = a.pos.empty() ? std::string() : to_str(a.pos[0]);
      return fail(n, "the template raised an exception: {}", msg);
    }
    if (name == "range") {
      SUSTAIN_TRY(check_args(n, "range()", a, 3, {}));
      if (a.pos.empty()) return fail(n, "range() expects at least 1 argument");
      for (const auto& v : a.pos)
        if (!is_intlike(v))
          return fail(n, "range() arguments must be integers, not {}", type_name(v));
      int64_t start = 0, stop, stp = 1;
      if (a.pos.size() == 1) {
        stop = as_int(a.pos[0]);
      } else {
        start = as_int(a.pos[0]);
        stop = as_int(a.pos[1]);
        if (a.pos.size() == 3) stp = as_int(a.pos[2]);
      }
      if (stp == 0) return fail(n, "range() arg 3 must not be zero");
      double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                               static_cast<double>(stp));
      if (count > static_cast<double>(lim_.max_steps) || count > 1e8)
        return fail(n, "range() of {} items exceeds the step limit of {}", count, lim_.max_steps);
      List out;
      for (int64_t i = start; stp > 0 ? i < stop : i > stop; i += stp)
        out.push_back(Value::integer(i));
      steps_ += static_cast<int64_t>(out.size());
      return Value::make_list(std::move(out));
    }
    if (name == "namespace" || name == "dict") {
      Dict d;
      if (!a.pos.empty()) {
        if (a.pos.size() > 1 || a.pos[0].kind != Kind::kDict)
          return fail(n, "{}() takes keyword arguments or one dict", name);
        d = *a.pos[0].dict;
      }
      for (const auto& [k, v] : a.kw) {
        if (name == "namespace" && contains_namespace(v))
          return fail(n, "a namespace cannot be stored inside a namespace");
        d.set(k, v);
      }
      Value v =
          Value::make_dict(std::move(d), name == "namespace" ? Kind::kNamespace : Kind::kDict);
      SUSTAIN_TRY(check_depth(n, v));
      return v;
    }
    if (name == "strftime_now") {
      SUSTAIN_ASSIGN_OR_RETURN(auto fmt_s, need_str(n, "strftime_now()", a.get(0, "format")));
      std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[512];
      size_t len = fmt_s.size() < 128 ? std::strftime(buf, sizeof(buf), fmt_s.c_str(), &tm) : 0;
      if (len == 0 && !fmt_s.empty()) return fail(n, "strftime_now(): cannot format '{}'", fmt_s);
      return Value::string(std::string(buf, len));
    }
    return fail(n, "unknown function '{}'", name);
  }

  Expected<Value> call_method(const Node& n, const Value& self, const std::string& name,
                              const Args& a) {
    std::string what = fmt::format("{}.{}()", type_name(self), name);
    if (self.kind == Kind::kDict) {
      if (name == "items" || name == "keys" || name == "values") {
        SUSTAIN_TRY(check_args(n, what.c_str(), a, 0, {}));
        List out;
        for (const auto& [k, v] : self.dict->items) {
          if (name == "items")
            out.push_back(Value::make_tuple({Value::string(k), v}));
          else if (name == "keys")
            out.push_back(Value::string(k));
          else
            out.push_back(v);
        }
        return Value::make_list(std::move(out));
      }
      if (name == "get") {
        SUSTAIN_TRY(check_args(n, what.c_str(), a, 2, {}));
        if (a.pos.empty()) return fail(n, "{} expects a key", what);
        if (a.pos[0].kind == Kind::kString)
          if (const Value* v = self.dict->find(a.pos[0].str())) return *v;
        return a.pos.size() > 1 ? a.pos[1] : Value::none();
      }
      if (name == "copy") return self;
    }
    if (self.kind == Kind::kList) {
      if (name == "count" || name == "index") {
        SUSTAIN_TRY(check_args(n, what.c_str(), a, 1, {}));
        if (a.pos.empty()) return fail(n, "{} expects an argument", what);
        int64_t count = 0;
        for (size_t i = 0; i < self.list->size(); ++i)
          if (equal((*self.list)[i], a.pos[0])) {
            if (name == "index") return Value::integer(static_cast<int64_t>(i));
            ++count;
          }
        if (name == "index") return fail(n, "{}: value is not in the list", what);
        return Value::integer(count);
      }
      if (name == "copy") return self;
    }
    if (self.kind == Kind::kString) return call_str_method(n, self.str(), name, what, a);
    return fail(n, "{} is not allowed: the template sandbox is immutable", what);
  }

  Expected<Value> call_str_method(const Node& n, const std::string& s, const std::string& name,
                                  const std::string& what, const Args& a) {
    const char* w = what.c_str();
    if (name == "startswith" || name == "endswith") {
      SUSTAIN_TRY(check_args(n, w, a, 1, {}));
      if (a.pos.empty()) return fail(n, "{} expects an argument", what);
      std::vector<Value> options = a.pos[0].kind == Kind::kList ? *a.pos[0].list : List{a.pos[0]};
      for (const auto& o : options) {
        SUSTAIN_ASSIGN_OR_RETURN(auto p, need_str(n, w, &o));
        bool hit = name == "startswith"
                       ? s.compare(0, p.size(), p) == 0
                       : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
        if (hit) return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      SUSTAIN_TRY(check_args(n, w, a, 1, {}));
      const Value* chars = a.get(0, "chars");
      if (chars && chars->kind != Kind::kNone && chars->kind != Kind::kString)
        return fail(n, "{}: chars must be a string, not {}", what, type_name(*chars));
      return Value::string(strip(s, chars, name != "rstrip", name != "lstrip"));
    }
    if (name == "split" || name == "rsplit") {
      SUSTAIN_TRY(check_args(n, w, a, 2, {"sep", "maxsplit"}));
      const Value* sep = a.get(0, "sep");
      const Value* ms = a.get(1, "maxsplit");
      int64_t maxsplit = ms && is_intlike(*ms) ? as_int(*ms) : -1;
      std::vector<std::string> parts;
      if (!sep || sep->kind == Kind::kNone) {
        parts = split_ws(s, name == "split" ? maxsplit : -1);
      } else {
        SUSTAIN_ASSIGN_OR_RETURN(auto sp, need_str(n, w, sep));
        if (sp.empty()) return fail(n, "{}: empty separator", what);
        parts = split_sep(s, sp, name == "split" ? maxsplit : -1);
      }
      if (name == "rsplit" && maxsplit >= 0 && static_cast<int64_t>(parts.size()) > maxsplit + 1) {
        // Re-join the leading pieces: rsplit limits the splits from the right.
        std::string joiner = sep && sep->kind == Kind::kString ? sep->str() : " ";
        size_t keep = parts.size() - static_cast<size_t>(maxsplit);
        std::string head;
        for (size_t i = 0; i < keep; ++i) head += (i ? joiner : "") + parts[i];
        parts.erase(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(keep));
        parts.insert(parts.begin(), head);
      }
      List out;
      for (auto& p : parts) out.push_back(Value::string(std::move(p)));
      SUSTAIN_TRY(charge(n, s.size()));
      return Value::make_list(std::move(out));
    }
    if (name == "splitlines") {
      List out;
      for (auto& p : split_sep(s, "\n", -1)) out.push_back(Value::string(std::move(p)));
      if (!out.empty() && out.back().str().empty()) out.pop_back();
      return Value::make_list(std::move(out));
    }
    if (name == "upper") return Value::string(upper_text(s));
    if (name == "lower") return Value::string(lower_text(s));
    if (name == "title") return Value::string(title_case(s));
    if (name == "capitalize") return Value::string(capitalize(s));
    if (name == "replace") {
      SUSTAIN_TRY(check_args(n, w, a, 3, {}));
      SUSTAIN_ASSIGN_OR_RETURN(auto from, need_str(n, w, a.get(0, "old")));
      SUSTAIN_ASSIGN_OR_RETURN(auto to, need_str(n, w, a.get(1, "new")));
      const Value* cnt = a.get(2, "count");
      std::string r = replace_all(s, from, to, cnt && is_intlike(*cnt) ? as_int(*cnt) : -1);
      SUSTAIN_TRY(charge(n, r.size()));
      return Value::string(std::move(r));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "count") {
      SUSTAIN_TRY(check_args(n, w, a, 1, {}));
      SUSTAIN_ASSIGN_OR_RETURN(auto sub, need_str(n, w, a.get(0, "sub")));
      if (name == "count") {
        if (sub.empty()) return Value::integer(static_cast<int64_t>(text::count_cps(s)) + 1);
        int64_t c = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++c;
        return Value::integer(c);
      }
      size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (p == std::string::npos) {
        if (name == "index") return fail(n, "{}: substring not found", what);
        return Value::integer(-1);
      }
      return Value::integer(
          static_cast<int64_t>(text::count_cps(std::string_view(s).substr(0, p))));
    }
    if (name == "join") {
      SUSTAIN_TRY(check_args(n, w, a, 1, {}));
      if (a.pos.empty()) return fail(n, "{} expects an iterable", what);
      SUSTAIN_ASSIGN_OR_RETURN(auto items, iterate(n, a.pos[0]));
      std::string out;
      for (size_t i = 0; i < items.size(); ++i) {
        if (items[i].kind != Kind::kString)
          return fail(n, "{}: sequence item {}: expected str, {} found", what, i,
                      type_name(items[i]));
        if (i) out += s;
        out += items[i].str();
        SUSTAIN_TRY(charge(n, out.size() / 16));
      }
      return Value::string(std::move(out));
    }
    if (name == "isupper") return Value::boolean(is_upper_text(s));
    if (name == "islower") return Value::boolean(is_lower_text(s));
    if (name.rfind("is", 0) == 0) {
      if (s.empty()) return Value::boolean(false);
      bool r = true;
      for (uint32_t c : text::to_cps(s)) {
        bool digit = c >= '0' && c <= '9';
        if (name == "isdigit")
          r = r && digit;
        else if (name == "isalpha")
          r = r && is_alpha(c) && !digit;
        else if (name == "isalnum")
          r = r && is_alpha(c);
        else if (name == "isspace")
          r = r && text::is_space(c);
      }
      return Value::boolean(r);
    }
    return fail(n, "{} is not supported", what);
  }

  // ---- filters ----

  Expected<Value> attr_path(const Node& n, const Value& v, const std::string& path) {
    Value cur = v;
    for (const auto& part : split_sep(path, ".", -1)) {
      bool numeric = !part.empty() && std::all_of(part.begin(), part.end(),
                                                  [](char c) { return c >= '0' && c <= '9'; });
      if (numeric && part.size() < 18) {
        SUSTAIN_ASSIGN_OR_RETURN(cur, get_item(n, cur, Value::integer(std::stoll(part))));
      } else {
        SUSTAIN_ASSIGN_OR_RETURN(cur, get_item(n, cur, Value::string(part)));
      }
    }
    return cur;
  }

  Expected<Value> filter(const Node& n, const std::string& name, const Value& in, const Args& a) {
    std::string what = fmt::format("filter '{}'", name);
    const char* w = what.c_str();
    if (name == "safe") return in;
    if (name == "default" || name == "d") {
      SUSTAIN_TRY(check_args(n, w, a, 2, {"default_value", "boolean"}));
      const Value* dv = a.get(0, "default_value");
      const Value* boolean = a.get(1, "boolean");
      bool use = in.kind == Kind::kUndefined || (boolean && truthy(*boolean) && !truthy(in));
      if (use) return dv ? *dv : Value::string("");
      return in;
    }
    if (name == "string") return Value::string(to_str(in));
    if (name == "trim") {
      SUSTAIN_TRY(check_args(n, w, a, 1, {"chars"}));
      const Value* chars = a.get(0, "chars");
      if (chars && chars->kind != Kind::kNone && chars->kind != Kind::kString)
        return fail(n, "{}: chars must be a string", what);
      return Value::string(strip(to_str(in), chars, true, true));
    }
    if (name == "lower") return Value::string(lower_text(to_str(in)));
    if (name == "upper") return Value::string(upper_text(to_str(in)));
    if (name == "capitalize") return Value::string(capitalize(to_str(in)));
    if (name == "title") return Value::string(title_filter(to_str(in)));
    if (name == "length" || name == "count") {
      switch (in.kind) {
        case Kind::kUndefined:
          return Value::integer(0);
        case Kind::kString:
          return Value::integer(static_cast<int64_t>(text::count_cps(in.str())));
        case Kind::kList:
          return Value::integer(static_cast<int64_t>(in.list->size()));
        case Kind::kDict:
          return Value::integer(static_cast<int64_t>(in.dict->items.size()));
        default:
          return fail(n, "object of type '{}' has no len()", type_name(in));
      }
    }
    if (name == "tojson") return tojson(n, in, a);
    if (name == "items") {
      if (in.kind == Kind::kUndefined) return Value::make_list({});
      if (in.kind != Kind::kDict)
        return fail(n, "{}: can only get item pairs from a mapping, not {}", what, type_name(in));
      return call_method(n, in, "items", Args{});
    }
    if (name == "dictsort") {
      SUSTAIN_TRY(check_args(n, w, a, 3, {"case_sensitive", "by", "reverse"}));
      if (in.kind != Kind::kDict)
        return fail(n, "{}: expected a mapping, got {}", what, type_name(in));
      const Value* cs = a.get(0, "case_sensitive");
      const Value* by = a.get(1, "by");
      const Value* rev = a.get(2, "reverse");
      bool case_sensitive = cs && truthy(*cs);
      bool by_value = by && by->kind == Kind::kString && by->str() == "value";
      List pairs;
      for (const auto& [k, v] : in.dict->items)
        pairs.push_back(Value::make_tuple({Value::string(k), v}));
      Status st = Status::ok();
      std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
        Value kx = (*x.list)[by_value ? 1 : 0], ky = (*y.list)[by_value ? 1 : 0];
        if (!case_sensitive && kx.is_string()) kx = Value::string(lower_text(kx.str()));
        if (!case_sensitive && ky.is_string()) ky = Value::string(lower_text(ky.str()));
        auto c = order(n, "<", kx, ky);
        if (!c) {
          st = c.status();
          return false;
        }
        return *c < 0;
      });
      SUSTAIN_TRY(st);
      if (rev && truthy(*rev)) std::reverse(pairs.begin(), pairs.end());
      return Value::make_list(std::move(pairs));
    }
    if (name == "join") {
      SUSTAIN_TRY(check_args(n, w, a, 2, {"d", "attribute"}));
      const Value* sep = a.get(0, "d");
      const Value* attr = a.get(1, "attribute");
      SUSTAIN_ASSIGN_OR_RETURN(auto items, iterate(n, in));
      std::string s = sep ? to_str(*sep) : std::string();
      std::string out;
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += s;
        if (attr && attr->kind != Kind::kNone) {
          SUSTAIN_ASSIGN_OR_RETURN(auto v, attr_path(n, items[i], to_str(*attr)));
          append_str(v, out);
        } else {
          append_str(items[i], out);
        }
        SUSTAIN_TRY(charge(n, out.size() / 16));
      }
      return Value::string(std::move(out));
    }
    if (name == "first" || name == "last") {
      SUSTAIN_ASSIGN_OR_RETURN(auto items, iterate(n, in));
      if (items.empty()) return Value::undefined(fmt::format("{} of an empty sequence", name));
      return name == "first" ? items.front() : items.back();
    }
    if (name == "list") {
      SUSTAIN_ASSIGN_OR_RETURN(auto items, iterate(n, in));
      return Value::make_list(std::move(items));
    }
    if (name == "reverse") {
      if (in.kind == Kind::kString) {
        auto cps = text::to_cps(in.str());
        std::reverse(cps.begin(), cps.end());
        return Value::string(text::from_cps(cps.data(), cps.data() + cps.size()));
      }
      SUSTAIN_ASSIGN_OR_RETURN(auto items, iterate(n, in));
      std::reverse(items.begin(), items.end());
      return Value::make_list(std::move(items));
    }
    if (name == "map") return filter_map(n, in, a);
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr")
      return filter_select(n, name, in, a);
    if (name == "replace") {
      SUSTAIN_TRY(check_args(n, w, a, 3, {"old", "new", "count"}));
      SUSTAIN_ASSIGN_OR_RETURN(auto from, need_str(n, w, a.get(0, "old")));
      SUSTAIN_ASSIGN_OR_RETURN(auto to, need_str(n, w, a.get(1, "new")));
      const Value* cnt = a.get(2, "count");
      std::string r =
          replace_all(to_str(in), from, to, cnt && is_intlike(*cnt) ? as_int(*cnt) : -1);
      SUSTAIN_TRY(charge(n, r.size()));
      return Value::string(std::move(r));
    }
    if (name == "int") {
      SUSTAIN_TRY(check_args(n, w, a, 2, {"default", "base"}));
      const Value* def = a.get(0, "default");
      Value fallback = def ? *def : Value::integer(0);
      if (is_intlike(in)) return Value::integer(as_int(in));
      if (in.kind == Kind::kFloat) {
        if (!std::isfinite(in.f) || std::fabs(in.f) >= 9.2e18) return fallback;
        return Value::integer(static_cast<int64_t>(in.f));
      }
      if (in.kind == Kind::kString) {
        std::string t = strip(in.str(), nullptr, true, true);
        char* end = nullptr;
        errno = 0;
        long long v = std::strtoll(t.c_str(), &end, 10);
        if (!t.empty() && *end == '\0' && errno == 0) return Value::integer(v);
        double d = std::strtod(t.c_str(), &end);
        if (!t.empty() && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18)
          return Value::integer(static_cast<int64_t>(d));
      }
      return fallback;
    }
    if (name == "float") {
      SUSTAIN_TRY(check_args(n, w, a, 1, {"default"}));
      const Value* def = a.get(0, "default");
      if (is_number(in)) return Value::number(as_float(in));
      if (in.kind == Kind::kString) {
        std::string t = strip(in.str(), nullptr, true, true);
        char* end = nullptr;
        double d = std::strtod(t.c_str(), &end);
        if (!t.empty() && *end == '\0') return Value::number(d);
      }
      return def ? *def : Value::number(0.0);
    }
    if (name == "abs") {
      if (!is_number(in)) return fail(n, "{}: bad operand type '{}'", what, type_name(in));
      if (is_intlike(in)) {
        if (as_int(in) == INT64_MIN) return fail(n, "integer overflow in abs");
        return Value::integer(std::llabs(as_int(in)));
      }
      return Value::number(std::fabs(in.f));
    }
    if (name == "round") {
      SUSTAIN_TRY(check_args(n, w, a, 2, {"precision", "method"}));
      if (!is_number(in)) return fail(n, "{}: expected a number, got {}", what, type_name(in));
      const Value* p = a.get(0, "precision");
      const Value* m = a.get(1, "method");
      int64_t prec = p && is_intlike(*p) ? std::clamp<int64_t>(as_int(*p), -300, 300) : 0;
      std::string method = m && m->is_string() ? m->str() : "common";
      double scale = std::pow(10.0, static_cast<double>(prec));
      double x = as_float(in) * scale;
      if (method == "common")
        x = std::nearbyint(x);  // Python rounds half to even
      else if (method == "ceil")
        x = std::ceil(x);
      else if (method == "floor")
        x = std::floor(x);
      else
        return fail(n, "{}: method must be common, ceil or floor, not '{}'", what, method);
      return Value::number(x / scale);
    }
    if (name == "sum" || name == "min" || name == "max" || name == "sort" || name == "unique")
      return filter_seq(n, name, in, a);
    if (name == "indent") {
      SUSTAIN_TRY(check_args(n, w, a, 3, {"width", "first", "blank"}));
      const Value* width = a.get(0, "width");
      const Value* first = a.get(1, "first");
      const Value* blank = a.get(2, "blank");
      std::string ind;
      if (width && width->is_string()) {
        ind = width->str();
      } else {
        int64_t wd = width && is_intlike(*width) ? as_int(*width) : 4;
        if (wd < 0 || wd > 1024) return fail(n, "{}: width {} is out of range", what, wd);
        ind.assign(static_cast<size_t>(wd), ' ');
      }
      std::string s = to_str(in) + "\n";
      std::vector<std::string> lines = split_sep(s, "\n", -1);
      lines.pop_back();  // Python's splitlines drops the piece after the final newline
      std::string out;
      for (size_t i = 0; i < lines.size(); ++i) {
        if (i) out += '\n';
        bool indent_line = i > 0 && (!lines[i].empty() || (blank && truthy(*blank)));
        if (indent_line) out += ind;
        out += lines[i];
      }
      if (first && truthy(*first)) out = ind + out;
      SUSTAIN_TRY(charge(n, out.size()));
      return Value::string(std::move(out));
    }
    if (name == "wordcount")
      return Value::integer(static_cast<int64_t>(split_ws(to_str(in), -1).size()));
    if (name == "escape" || name == "e") {
      std::string out;
      for (char c : to_str(in)) {
        switch (c) {
          case '&':
            out += "&amp;";
            break;
          case '<':
            out += "&lt;";
            break;
          case '>':
            out += "&gt;";
            break;
          case '"':
            out += "&#34;";
            break;
          case '\'':
            out += "&#39;";
            break;
          default:
            out += c;
        }
      }
      return Value::string(std::move(out));
    }
    return fail(n, "unknown filter '{}'", name);
  }

  Expected<Value> tojson(const Node& n, const Value& in, const Args& a) {
    SUSTAIN_TRY(check_args(n, "filter 'tojson'", a, 1,
                           {"indent", "ensure_ascii", "separators", "sort_keys"}));
    JsonStyle st;
    const Value* indent = a.get(0, "indent");
    if (indent && indent->kind != Kind::kNone) {
      st.pretty = true;
      st.item_sep.pop_back();  // ", " -> "," as json.dumps does with an indent
      if (indent->is_string()) {
        st.indent = indent->str();
      } else if (is_intlike(*indent)) {
        int64_t w = as_int(*indent);
        if (w > 1024) return fail(n, "tojson: indent {} is too large", w);
        st.indent.assign(static_cast<size_t>(std::max<int64_t>(w, 0)), ' ');
      } else {
        return fail(n, "tojson: indent must be an integer or a string, not {}", type_name(*indent));
      }
    }
    for (const auto& [k, v] : a.kw) {
      if (k == "ensure_ascii") st.ensure_ascii = truthy(v);
      if (k == "sort_keys") st.sort_keys = truthy(v);
      if (k == "separators" && v.kind != Kind::kNone) {
        if (v.kind != Kind::kList || v.list->size() != 2 || !(*v.list)[0].is_string() ||
            !(*v.list)[1].is_string())
          return fail(n, "tojson: separators must be a pair of strings");
        st.item_sep = (*v.list)[0].str();
        st.key_sep = (*v.list)[1].str();
      }
    }
    std::string out;
    Status s = dump_json(in, st, 0, out);
    if (!s) return fail(n, "{}", s.message());
    SUSTAIN_TRY(charge(n, out.size()));
    return Value::string(std::move(out));
  }

  Expected<Value> filter_map(const Node& n, const Value& in, const Args& a) {
    SUSTAIN_ASSIGN_OR_RETURN(auto items, iterate(n, in));
    List out;
    const Value* attr = nullptr;
    const Value* def = nullptr;
    for (const auto& [k, v] : a.kw) {
      if (k == "attribute")
        attr = &v;
      else if (k == "default")
        def = &v;
    }
    if (attr) {
      for (const auto& it : items) {
        SUSTAIN_ASSIGN_OR_RETURN(auto v, attr_path(n, it, to_str(*attr)));
        if (v.is_undefined() && def) v = *def;
        out.push_back(std::move(v));
      }
      return Value::make_list(std::move(out));
    }
    if (a.pos.empty() || !a.pos[0].is_string())
      return fail(n, "filter 'map' expects a filter name or attribute=");
    Args rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    for (const auto& it : items) {
      SUSTAIN_TRY(step(n));
      SUSTAIN_ASSIGN_OR_RETURN(auto v, filter(n, a.pos[0].str(), it, rest));
      out.push_back(std::move(v));
    }
    return Value::make_list(std::move(out));
  }

  Expected<Value> filter_select(const Node& n, const std::string& name, const Value& in,
                                const Args& a) {
    bool by_attr = name == "selectattr" || name == "rejectattr";
    bool keep_if = name == "select" || name == "selectattr";
    SUSTAIN_ASSIGN_OR_RETURN(auto items, iterate(n, in));
    size_t next = 0;
    std::string attr;
    if (by_attr) {
      if (a.pos.empty() || !a.pos[0].is_string())
        return fail(n, "filter '{}' expects an attribute name", name);
      attr = a.pos[0].str();
      next = 1;
    }
    std::string test_name;
    Args targs;
    if (a.pos.size() > next) {
      if (!a.pos[next].is_string()) return fail(n, "filter '{}' expects a test name", name);
      test_name = a.pos[next].str();
      targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(next) + 1, a.pos.end());
    }
    List out;
    for (const auto& it : items) {
      SUSTAIN_TRY(step(n));
      Value v = it;
      if (by_attr) {
        SUSTAIN_ASSIGN_OR_RETURN(v, attr_path(n, it, attr));
      }
      bool r;
      if (test_name.empty()) {
        r = truthy(v);
      } else {
        SUSTAIN_ASSIGN_OR_RETURN(r, test(n, test_name, v, targs));
      }
      if (r == keep_if) out.push_back(it);
    }
    return Value::make_list(std::move(out));
  }

  Expected<Value> filter_seq(const Node& n, const std::string& name, const Value& in,
                             const Args& a) {
    SUSTAIN_ASSIGN_OR_RETURN(auto items, iterate(n, in));
    const Value* attr = nullptr;
    bool case_sensitive = false, reverse = false;
    Value start = Value::integer(0);
    for (const auto& [k, v] : a.kw) {
      if (k == "attribute")
        attr = &v;
      else if (k == "case_sensitive")
        case_sensitive = truthy(v);
      else if (k == "reverse")
        reverse = truthy(v);
      else if (k == "start")
        start = v;
      else
        return fail(n, "filter '{}' got an unexpected keyword argument '{}'", name, k);
    }
    if (name == "sort" && !a.pos.empty()) reverse = truthy(a.pos[0]);
    if (name == "sort" && a.pos.size() > 1) case_sensitive = truthy(a.pos[1]);
    auto key = [&](const Value& v) -> Expected<Value> {
      Value k = v;
      if (attr && attr->kind != Kind::kNone) {
        SUSTAIN_ASSIGN_OR_RETURN(k, attr_path(n, v, to_str(*attr)));
      }
      if (!case_sensitive && k.is_string()) k = Value::string(lower_text(k.str()));
      return k;
    };
    std::vector<std::pair<Value, Value>> keyed;
    for (const auto& v : items) {
      SUSTAIN_ASSIGN_OR_RETURN(auto k, key(v));
      keyed.emplace_back(std::move(k), v);
    }
    if (name == "sum") {
      Value acc = start;
      for (const auto& kv : keyed) {
        if (!is_number(acc) || !is_number(kv.first))
          return fail(n, "filter 'sum': cannot add {} and {}", type_name(acc), type_name(kv.first));
        SUSTAIN_ASSIGN_OR_RETURN(acc, arith(n, "+", acc, kv.first));
      }
      return acc;
    }
    Status st = Status::ok();
    auto less = [&](const std::pair<Value, Value>& x, const std::pair<Value, Value>& y) {
      auto c = order(n, "<", x.first, y.first);
      if (!c) {
        st = c.status();
        return false;
      }
      return *c < 0;
    };
    if (name == "unique") {
      List out;
      std::vector<Value> seen;
      for (const auto& kv : keyed) {
        SUSTAIN_TRY(step(n));
        bool dup = false;
        for (const auto& s : seen) dup = dup || equal(s, kv.first);
        if (!dup) {
          seen.push_back(kv.first);
          out.push_back(kv.second);
        }
      }
      return Value::make_list(std::move(out));
    }
    if (name == "min" || name == "max") {
      if (keyed.empty()) return Value::undefined(fmt::format("{} of an empty sequence", name));
      auto it = name == "min" ? std::min_element(keyed.begin(), keyed.end(), less)
                              : std::max_element(keyed.begin(), keyed.end(), less);
      SUSTAIN_TRY(st);
      return it->second;
    }
    std::stable_sort(keyed.begin(), keyed.end(), less);
    SUSTAIN_TRY(st);
    if (reverse) std::reverse(keyed.begin(), keyed.end());
    List out;
    for (auto& kv : keyed) out.push_back(std::move(kv.second));
    return Value::make_list(std::move(out));
  }

  // ---- tests ----

  Expected<bool> test(const Node& n, const std::string& name, const Value& v, const Args& a) {
    auto arg = [&]() -> Expected<Value> {
      if (a.pos.empty()) return fail(n, "test '{}' expects an argument", name);
      return a.pos[0];
    };
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.kind == Kind::kNone;
    if (name == "boolean") return v.kind == Kind::kBool;
    if (name == "true") return v.kind == Kind::kBool && v.b;
    if (name == "false") return v.kind == Kind::kBool && !v.b;
    if (name == "integer") return v.kind == Kind::kInt;
    if (name == "float") return v.kind == Kind::kFloat;
    if (name == "number") return is_number(v);
    if (name == "string") return v.kind == Kind::kString;
    if (name == "mapping") return v.kind == Kind::kDict;
    // Jinja's iterable/sequence tests accept undefined (it iterates as empty
    // and has a length) and dicts.
    if (name == "iterable" || name == "sequence")
      return v.kind == Kind::kString || v.kind == Kind::kList || v.kind == Kind::kDict ||
             v.kind == Kind::kUndefined;
    if (name == "callable") return v.kind == Kind::kCallable;
    if (name == "lower" || name == "upper") {
      std::string s = to_str(v);
      return name == "lower" ? is_lower_text(s) : is_upper_text(s);
    }
    if (name == "odd" || name == "even" || name == "divisibleby") {
      if (!is_intlike(v))
        return fail(n, "test '{}' expects an integer, got {}", name, type_name(v));
      if (name == "divisibleby") {
        SUSTAIN_ASSIGN_OR_RETURN(auto d, arg());
        if (!is_intlike(d) || as_int(d) == 0)
          return fail(n, "test 'divisibleby' expects a non-zero integer");
        return as_int(v) % as_int(d) == 0;
      }
      return (as_int(v) % 2 != 0) == (name == "odd");
    }
    if (name == "eq" || name == "equalto" || name == "==") {
      SUSTAIN_ASSIGN_OR_RETURN(auto b, arg());
      return equal(v, b);
    }
    if (name == "ne" || name == "!=") {
      SUSTAIN_ASSIGN_OR_RETURN(auto b, arg());
      return !equal(v, b);
    }
    static const std::pair<const char*, const char*> kOrder[] = {
        {"lt", "<"}, {"lessthan", "<"},    {"le", "<="},
        {"gt", ">"}, {"greaterthan", ">"}, {"ge", ">="}};
    for (const auto& [alias, op] : kOrder)
      if (name == alias || name == op) {
        SUSTAIN_ASSIGN_OR_RETURN(auto b, arg());
        return compare(n, op, v, b);
      }
    if (name == "in") {
      SUSTAIN_ASSIGN_OR_RETURN(auto b, arg());
      return contains(n, b, v);
    }
    if (name == "sameas") {
      SUSTAIN_ASSIGN_OR_RETURN(auto b, arg());
      if (v.kind != b.kind) return false;
      if (v.kind == Kind::kNone || v.kind == Kind::kUndefined) return true;
      if (v.kind == Kind::kBool) return v.b == b.b;
      if (v.kind == Kind::kList) return v.list == b.list;
      if (v.kind == Kind::kDict || v.kind == Kind::kNamespace) return v.dict == b.dict;
      return equal(v, b);
    }
    if (name == "escaped") return false;
    return fail(n, "unknown test '{}'", name);
  }

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

}  // namespace

Expected<std::string> render_template(const Template& t, const Value& context) {
  Renderer r(t, context);
  return r.run();
}

}  // namespace sustain::tokenizer::jinja
