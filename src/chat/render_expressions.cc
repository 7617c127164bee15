// Renderer expressions: names, attribute and item access, slices,
// arithmetic, comparisons and membership with Python's semantics.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <string>

#include "chat/renderer.h"

namespace sustain::chat::jinja {

// eval() recurses through every expression, so each case with locals of
// its own lives in a separate function: eval's frame stays small.
Expected<Value> Renderer::eval(const Node& n) {
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

Expected<Value> Renderer::eval_access(const Node& n) {
  SUSTAIN_ASSIGN_OR_RETURN(auto obj, eval(*n.kids[0]));
  if (n.type == NodeType::kGetAttr) return get_attr(n, obj, n.name);
  SUSTAIN_ASSIGN_OR_RETURN(auto key, eval(*n.kids[1]));
  return get_item(n, obj, key);
}

Expected<Value> Renderer::eval_call(const Node& n) {
  SUSTAIN_ASSIGN_OR_RETURN(auto head, eval(*n.kids[0]));
  SUSTAIN_ASSIGN_OR_RETURN(auto args, eval_args(n, 1));
  if (n.type == NodeType::kCall) return call(n, head, args);
  if (n.type == NodeType::kFilter) return filter(n, n.name, head, args);
  SUSTAIN_ASSIGN_OR_RETURN(bool r, test(n, n.name, head, args));
  return Value::boolean(r != n.flag);
}

Expected<Value> Renderer::eval_unary(const Node& n) {
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

Expected<Value> Renderer::eval_compare(const Node& n) {
  SUSTAIN_ASSIGN_OR_RETURN(auto left, eval(*n.kids[0]));
  for (size_t i = 1; i < n.kids.size(); ++i) {
    SUSTAIN_ASSIGN_OR_RETURN(auto right, eval(*n.kids[i]));
    SUSTAIN_ASSIGN_OR_RETURN(bool r, compare(n, n.names[i - 1], left, right));
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Expected<Value> Renderer::eval_cond(const Node& n) {
  SUSTAIN_ASSIGN_OR_RETURN(auto c, eval(*n.kids[1]));
  if (truthy(c)) return eval(*n.kids[0]);
  if (n.kids[2]) return eval(*n.kids[2]);
  return Value::undefined("the inline if expression has no else branch");
}

Expected<Value> Renderer::eval_literal(const Node& n) {
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

Expected<Args> Renderer::eval_args(const Node& n, size_t first) {
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

bool Renderer::is_method(Kind k, const std::string& name) {
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

Value Renderer::bound(const Value& self, const std::string& name) {
  Callable c;
  c.type = Callable::kMethod;
  c.name = name;
  c.self = std::make_shared<const Value>(self);
  return Value::callable(std::move(c));
}

// obj.name: Python attributes (methods) first, then the item.
Expected<Value> Renderer::get_attr(const Node& n, const Value& obj, const std::string& name) {
  if (obj.kind == Kind::kUndefined) return fail(n, "{}", obj.str());
  if (is_method(obj.kind, name)) return bound(obj, name);
  if (obj.kind == Kind::kDict || obj.kind == Kind::kNamespace) {
    if (const Value* v = obj.dict->find(name)) return *v;
  }
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", type_name(obj), name));
}

// obj[key]: the item first, then (for a string key) the attribute.
Expected<Value> Renderer::get_item(const Node& n, const Value& obj, const Value& key) {
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

Expected<Value> Renderer::eval_slice(const Node& n) {
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

Expected<Value> Renderer::eval_binary(const Node& n) {
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

Expected<Value> Renderer::repeat(const Node& n, const Value& v, int64_t times) {
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

Expected<Value> Renderer::arith(const Node& n, const std::string& op, const Value& a,
                                const Value& b) {
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

Expected<bool> Renderer::compare(const Node& n, const std::string& op, const Value& a,
                                 const Value& b) {
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

Expected<int> Renderer::order(const Node& n, const std::string& op, const Value& a,
                              const Value& b) {
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

Expected<bool> Renderer::contains(const Node& n, const Value& container, const Value& item) {
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

}  // namespace sustain::chat::jinja
