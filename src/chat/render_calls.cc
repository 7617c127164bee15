// Renderer calls: the globals (range, namespace, dict, raise_exception,
// strftime_now), macros, and the methods of strings, lists and dicts.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <string>

#include "chat/renderer.h"

namespace sustain::chat::jinja {

Status Renderer::check_args(const Node& n, const char* what, const Args& a, size_t max_pos,
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

Expected<std::string> Renderer::need_str(const Node& n, const char* what, const Value* v) {
  if (!v) return fail(n, "{}: missing a string argument", what);
  if (v->kind != Kind::kString)
    return fail(n, "{}: expected a string, got {}", what, type_name(*v));
  return v->str();
}

Expected<Value> Renderer::call(const Node& n, const Value& fn, const Args& a) {
  if (fn.kind == Kind::kUndefined) return fail(n, "{} (called as a function)", fn.str());
  if (fn.kind != Kind::kCallable) return fail(n, "'{}' object is not callable", type_name(fn));
  const Callable& c = *fn.fn;
  if (c.type == Callable::kMacro) return call_macro(n, c, a);
  if (c.type == Callable::kMethod) return call_method(n, *c.self, c.name, a);
  return call_builtin(n, c.name, a);
}

Expected<Value> Renderer::call_macro(const Node& n, const Callable& c, const Args& a) {
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
    return fail(n, "macro '{}' takes not more than {} argument(s), got {}", m.name, m.names.size(),
                a.pos.size());
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

Expected<Value> Renderer::call_builtin(const Node& n, const std::string& name, const Args& a) {
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
    Value v = Value::make_dict(std::move(d), name == "namespace" ? Kind::kNamespace : Kind::kDict);
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

Expected<Value> Renderer::call_method(const Node& n, const Value& self, const std::string& name,
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

Expected<Value> Renderer::call_str_method(const Node& n, const std::string& s,
                                          const std::string& name, const std::string& what,
                                          const Args& a) {
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
    return Value::integer(static_cast<int64_t>(text::count_cps(std::string_view(s).substr(0, p))));
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

}  // namespace sustain::chat::jinja
