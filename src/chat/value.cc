// The value model of the chat-template renderer: construction, Python's
// str()/repr() of values, json.dumps as Hugging Face's `tojson` calls it,
// and conversion from nlohmann::json.
#include <charconv>
#include <cmath>
#include <cstdio>

#include "chat/jinja.h"

namespace sustain::chat::jinja {

namespace text {

uint32_t decode_one(std::string_view s, size_t i, size_t& len) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  len = 1;
  if (c < 0x80) return c;
  int n = c >= 0xF0 && c < 0xF5 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
  if (c >= 0xF5) n = 0;
  if (n == 0 || i + static_cast<size_t>(n) > s.size()) return 0xDC00 + c;
  uint32_t cp = c & (0xFF >> (n + 1));
  for (int k = 1; k < n; ++k) {
    unsigned char d = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if ((d & 0xC0) != 0x80) return 0xDC00 + c;
    cp = (cp << 6) | (d & 0x3F);
  }
  static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return 0xDC00 + c;
  len = static_cast<size_t>(n);
  return cp;
}

std::vector<uint32_t> to_cps(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len;
    out.push_back(decode_one(s, i, len));
    i += len;
  }
  return out;
}

std::string from_cps(const uint32_t* begin, const uint32_t* end) {
  std::string out;
  for (const uint32_t* p = begin; p != end; ++p) {
    uint32_t cp = *p;
    if (cp >= 0xDC80 && cp <= 0xDCFF) {
      out += static_cast<char>(cp - 0xDC00);
    } else if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

size_t count_cps(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    decode_one(s, i, len);
    i += len;
    ++n;
  }
  return n;
}

bool is_space(uint32_t cp) {
  if (cp <= 0x20) return (cp >= 9 && cp <= 13) || (cp >= 0x1C && cp <= 0x20);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

uint32_t to_upper(uint32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
  if (c == 0xB5) return 0x39C;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0x131) return 'I';
  if (c == 0x17F) return 'S';
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c & 1 ? c - 1 : c;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return c & 1 ? c : c - 1;
  if (c >= 0x3B1 && c <= 0x3C9) return c == 0x3C2 ? 0x3A3 : c - 32;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

uint32_t to_lower(uint32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if ((c >= 0x100 && c <= 0x137 && c != 0x130) || (c >= 0x14A && c <= 0x177))
    return c & 1 ? c : c + 1;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return c & 1 ? c + 1 : c;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool is_cased_letter(uint32_t c) {
  return to_upper(c) != c || to_lower(c) != c || c == 0xDF;
}

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len;
    uint32_t c = decode_one(s, i, len);
    if (c < 0x80) {
      out += static_cast<char>(to_upper(c));
    } else if (c == 0xDF) {
      out += "SS";
    } else {
      uint32_t u = to_upper(c);
      if (u == c)
        out.append(s.substr(i, len));
      else
        out += from_cps(&u, &u + 1);
    }
    i += len;
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len;
    uint32_t c = decode_one(s, i, len);
    if (c < 0x80) {
      out += static_cast<char>(to_lower(c));
    } else if (c == 0x130) {
      out += "i\xcc\x87";  // İ -> i + combining dot above, as Python does
    } else {
      uint32_t l = to_lower(c);
      if (l == c)
        out.append(s.substr(i, len));
      else
        out += from_cps(&l, &l + 1);
    }
    i += len;
  }
  return out;
}

}  // namespace text

const Value* Dict::find(const std::string& key) const {
  auto it = index.find(key);
  return it == index.end() ? nullptr : &items[it->second].second;
}

void Dict::set(const std::string& key, Value v) {
  auto it = index.find(key);
  if (it != index.end()) {
    items[it->second].second = std::move(v);
    return;
  }
  index.emplace(key, items.size());
  items.emplace_back(key, std::move(v));
}

Value Value::undefined(std::string hint) {
  Value v;
  v.kind = Kind::kUndefined;
  v.s = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind = Kind::kBool;
  v.b = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind = Kind::kInt;
  v.i = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind = Kind::kString;
  v.s = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::make_list(List items) {
  Value v;
  v.kind = Kind::kList;
  int d = 0;
  for (const auto& x : items) d = std::max(d, x.depth);
  v.depth = d + 1;
  v.list = std::make_shared<const List>(std::move(items));
  return v;
}
Value Value::make_tuple(List items) {
  Value v = make_list(std::move(items));
  v.tuple = true;
  return v;
}
Value Value::make_dict(Dict dict, Kind kind) {
  Value v;
  v.kind = kind;
  int d = 0;
  for (const auto& kv : dict.items) d = std::max(d, kv.second.depth);
  v.depth = d + 1;
  v.dict = std::make_shared<Dict>(std::move(dict));
  return v;
}
Value Value::callable(Callable c) {
  Value v;
  v.kind = Kind::kCallable;
  v.fn = std::make_shared<const Callable>(std::move(c));
  return v;
}

// Python's repr(float): the shortest round-trip digits, fixed notation for
// exponents in [-4, 16), scientific (e+XX) otherwise, ".0" on integral values.
std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exp) + 1) + "." +
             digits.substr(static_cast<size_t>(exp) + 1);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return out;
}

// Python's repr(str): single quotes unless the text has ' and no ".
std::string string_repr(const std::string& s) {
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(q)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

void append_repr(const Value& v, std::string& out);

void append_str(const Value& v, std::string& out) {
  switch (v.kind) {
    case Kind::kUndefined:
      return;
    case Kind::kNone:
      out += "None";
      return;
    case Kind::kBool:
      out += v.b ? "True" : "False";
      return;
    case Kind::kInt:
      out += std::to_string(v.i);
      return;
    case Kind::kFloat:
      out += float_repr(v.f);
      return;
    case Kind::kString:
      out += v.str();
      return;
    case Kind::kList:
      out += v.tuple ? '(' : '[';
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) out += ", ";
        append_repr((*v.list)[i], out);
      }
      if (v.tuple && v.list->size() == 1) out += ',';
      out += v.tuple ? ')' : ']';
      return;
    case Kind::kDict:
    case Kind::kNamespace: {
      if (v.kind == Kind::kNamespace) out += "<Namespace ";
      out += '{';
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += string_repr(k);
        out += ": ";
        append_repr(x, out);
      }
      out += '}';
      if (v.kind == Kind::kNamespace) out += '>';
      return;
    }
    case Kind::kCallable:
      out += "<function " + v.fn->name + ">";
      return;
  }
}

void append_repr(const Value& v, std::string& out) {
  if (v.kind == Kind::kString) {
    out += string_repr(v.str());
  } else if (v.kind == Kind::kUndefined) {
    out += "Undefined";
  } else {
    append_str(v, out);
  }
}

std::string to_str(const Value& v) {
  if (v.kind == Kind::kString) return v.str();
  std::string out;
  append_str(v, out);
  return out;
}

namespace {

void json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\b') {
      out += "\\b";
    } else if (c == '\f') {
      out += "\\f";
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\u%04x", c);
      out += b;
    } else if (c >= 0x80 && ensure_ascii) {
      size_t len = 0;
      uint32_t cp = text::decode_one(s, i, len);
      char b[16];
      if (cp >= 0x10000) {
        uint32_t v = cp - 0x10000;
        std::snprintf(b, sizeof(b), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(b, sizeof(b), "\\u%04x", cp);
      }
      out += b;
      i += len;
      continue;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  out += '"';
}

}  // namespace

Status dump_json(const Value& v, const JsonStyle& st, int level, std::string& out) {
  auto newline = [&](int lvl) {
    out += '\n';
    for (int k = 0; k < lvl; ++k) out += st.indent;
  };
  switch (v.kind) {
    case Kind::kNone:
      out += "null";
      return Status::ok();
    case Kind::kBool:
      out += v.b ? "true" : "false";
      return Status::ok();
    case Kind::kInt:
      out += std::to_string(v.i);
      return Status::ok();
    case Kind::kFloat:
      if (std::isnan(v.f)) {
        out += "NaN";
      } else if (std::isinf(v.f)) {
        out += v.f < 0 ? "-Infinity" : "Infinity";
      } else {
        out += float_repr(v.f);
      }
      return Status::ok();
    case Kind::kString:
      json_string(v.str(), st.ensure_ascii, out);
      return Status::ok();
    case Kind::kList: {
      if (v.list->empty()) {
        out += "[]";
        return Status::ok();
      }
      out += '[';
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) out += st.item_sep;
        if (st.pretty) newline(level + 1);
        SUSTAIN_TRY(dump_json((*v.list)[i], st, level + 1, out));
      }
      if (st.pretty) newline(level);
      out += ']';
      return Status::ok();
    }
    case Kind::kDict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return Status::ok();
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (st.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += st.item_sep;
        if (st.pretty) newline(level + 1);
        json_string(items[i]->first, st.ensure_ascii, out);
        out += st.key_sep;
        SUSTAIN_TRY(dump_json(items[i]->second, st, level + 1, out));
      }
      if (st.pretty) newline(level);
      out += '}';
      return Status::ok();
    }
    default:
      return error(Code::kInvalidArgument, "tojson: object of type {} is not JSON serializable",
                   type_name(v));
  }
}

namespace {

template <typename J>
Expected<Value> convert(const J& j, int depth) {
  if (depth > kMaxValueDepth)
    return error(Code::kInvalidArgument, "context JSON nested deeper than {} levels",
                 kMaxValueDepth);
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::number(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& x : j) {
        SUSTAIN_ASSIGN_OR_RETURN(auto v, convert(x, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::make_list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) {
        SUSTAIN_ASSIGN_OR_RETURN(auto v, convert(it.value(), depth + 1));
        d.set(it.key(), std::move(v));
      }
      return Value::make_dict(std::move(d));
    }
    default:
      return error(Code::kInvalidArgument, "context JSON holds an unsupported value ({})",
                   j.type_name());
  }
}

}  // namespace

Expected<Value> from_json(const nlohmann::json& j) {
  return convert(j, 0);
}
Expected<Value> from_json(const nlohmann::ordered_json& j) {
  return convert(j, 0);
}

}  // namespace sustain::chat::jinja
