// Renderer filters (tojson, map, select, join, ...) and tests (is defined,
// is string, ...), as Jinja2 3.1 defines them.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <string>

#include "chat/renderer.h"

namespace sustain::chat::jinja {

Expected<Value> Renderer::attr_path(const Node& n, const Value& v, const std::string& path) {
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

Expected<Value> Renderer::filter(const Node& n, const std::string& name, const Value& in,
                                 const Args& a) {
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
    std::string r = replace_all(to_str(in), from, to, cnt && is_intlike(*cnt) ? as_int(*cnt) : -1);
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

Expected<Value> Renderer::tojson(const Node& n, const Value& in, const Args& a) {
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

Expected<Value> Renderer::filter_map(const Node& n, const Value& in, const Args& a) {
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

Expected<Value> Renderer::filter_select(const Node& n, const std::string& name, const Value& in,
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

Expected<Value> Renderer::filter_seq(const Node& n, const std::string& name, const Value& in,
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

Expected<bool> Renderer::test(const Node& n, const std::string& name, const Value& v,
                              const Args& a) {
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
    if (!is_intlike(v)) return fail(n, "test '{}' expects an integer, got {}", name, type_name(v));
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

}  // namespace sustain::chat::jinja
