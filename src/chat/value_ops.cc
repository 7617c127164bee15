// Python semantics of template values (see value_ops.h).
#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <string>

#include "chat/value_ops.h"

namespace sustain::chat::jinja {

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

// Unicode-aware where text:: maps the script (see jinja.h).
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

}  // namespace sustain::chat::jinja
