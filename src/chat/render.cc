// Renderer entry point and statements: output, if, for (with loop.*), set,
// set blocks, macro definitions, break/continue and generation scopes.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <string>

#include "chat/renderer.h"

namespace sustain::chat::jinja {

Status Renderer::exec_body(const Body& body) {
  for (const auto& st : body) {
    SUSTAIN_TRY(exec(*st));
    if (flow_ != Flow::kNormal) break;
  }
  return Status::ok();
}

Status Renderer::exec(const Node& n) {
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

Status Renderer::exec_output(const Node& n) {
  SUSTAIN_ASSIGN_OR_RETURN(auto v, eval(*n.kids[0]));
  if (v.kind == Kind::kString) return emit(n, v.str());
  std::string s;
  append_str(v, s);
  SUSTAIN_TRY(charge(n, s.size()));
  return emit(n, s);
}

Status Renderer::exec_if(const Node& n) {
  for (size_t i = 0; i < n.kids.size(); ++i) {
    SUSTAIN_ASSIGN_OR_RETURN(auto c, eval(*n.kids[i]));
    if (truthy(c)) return exec_body(n.bodies[i]);
  }
  if (n.bodies.size() > n.kids.size()) return exec_body(n.bodies.back());
  return Status::ok();
}

Status Renderer::exec_define(const Node& n) {
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

Status Renderer::assign_targets(const Node& n, const std::vector<std::string>& names,
                                const Value& v, Frame& frame) {
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

Status Renderer::exec_for(const Node& n) {
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

Status Renderer::exec_set(const Node& n) {
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

Expected<std::vector<Value>> Renderer::iterate(const Node& n, const Value& v) {
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

Expected<std::string> render_template(const Template& t, const Value& context) {
  Renderer r(t, context);
  return r.run();
}

}  // namespace sustain::chat::jinja
