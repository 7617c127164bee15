#include "grammar/schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "grammar/gbnf.h"
#include "grammar/regex.h"

namespace sustain::grammar {
namespace {

// Ordered: properties are generated in the order the schema lists them.
using json = nlohmann::ordered_json;

// Rules every schema grammar may use, each defined once, on first use.
// Whitespace is bounded and numbers have bounded digits so a model cannot
// wander forever inside one token class (the grammar stays a subset of JSON).
struct Primitive {
  const char* name;
  const char* body;
  std::vector<const char*> deps;
};
const std::vector<Primitive>& primitives() {
  static const std::vector<Primitive> p = {
      {"ws", R"(( " " | "\n" [ \t]{0,20} )?)", {}},
      // One character of a JSON string, raw or escaped; \u escapes never
      // name a surrogate (a lone one is not valid JSON text for most parsers).
      {"json-char",
       R"([^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) ))",
       {}},
      {"plain-char", R"([^"\\\x00-\x1F])", {}},
      {"string", R"("\"" json-char* "\"")", {"json-char"}},
      {"integer", R"("-"? ( "0" | [1-9] [0-9]{0,15} ))", {}},
      {"number",
       R"("-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?)",
       {}},
      {"boolean", R"("true" | "false")", {}},
      {"null", R"("null")", {}},
      {"value",
       R"(object | array | string | number | boolean | null)",
       {"object", "array", "string", "number", "boolean", "null"}},
      {"object",
       R"("{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}")",
       {"ws", "string", "value"}},
      {"array", R"("[" ws ( value ws ( "," ws value ws )* )? "]")", {"ws", "value"}},
      // RFC 3339 full-date with every day that exists in every year (29
      // February is left out: it needs the year to decide).
      {"date",
       R"([0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ))",
       {}},
      {"time",
       R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
       {}},
      {"date-time", R"(date "T" time)", {"date", "time"}},
      {"uuid",
       R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})",
       {}},
      {"email-atom", R"([a-zA-Z0-9_%+-]{1,16})", {}},
      {"email-label", R"([a-zA-Z0-9] ( [a-zA-Z0-9-]{0,20} [a-zA-Z0-9] )?)", {}},
      {"email",
       R"(email-atom ( "." email-atom ){0,3} "@" email-label ( "." email-label ){1,3})",
       {"email-atom", "email-label"}},
  };
  return p;
}

const std::set<std::string>& annotations() {
  static const std::set<std::string> a = {"title",    "description", "default",  "examples",
                                          "$schema",  "$id",         "$comment", "deprecated",
                                          "readOnly", "writeOnly"};
  return a;
}

const std::set<std::string>& handled() {
  static const std::set<std::string> h = {"type",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "enum",
                                          "const",
                                          "items",
                                          "minItems",
                                          "maxItems",
                                          "anyOf",
                                          "oneOf",
                                          "$ref",
                                          "$defs",
                                          "definitions",
                                          "pattern",
                                          "format",
                                          "minLength",
                                          "maxLength",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "prefixItems",
                                          "minProperties",
                                          "maxProperties",
                                          "allOf"};
  return h;
}

// Integers stay within what the "integer" primitive writes (16 digits), so
// range arithmetic below cannot overflow.
constexpr int64_t kMaxBound = 9'999'999'999'999'999;

std::string digits_class(char lo, char hi) {
  return lo == hi ? fmt::format("\"{}\"", lo) : fmt::format("[{}-{}]", lo, hi);
}

// Every digit string of a's length between a and b (a <= b, same length).
std::string same_length_range(const std::string& a, const std::string& b) {
  if (a.empty()) return "";
  if (a[0] == b[0]) {
    const std::string rest = same_length_range(a.substr(1), b.substr(1));
    return digits_class(a[0], a[0]) + (rest.empty() ? "" : " " + rest);
  }
  const size_t n = a.size() - 1;
  const std::string ar = a.substr(1), br = b.substr(1);
  const bool a_floor = ar.find_first_not_of('0') == std::string::npos;
  const bool b_ceil = br.find_first_not_of('9') == std::string::npos;
  std::vector<std::string> alts;
  char lo = a[0], hi = b[0];
  if (!a_floor) {
    alts.push_back(digits_class(a[0], a[0]) + " " + same_length_range(ar, std::string(n, '9')));
    ++lo;
  }
  std::string last;
  if (!b_ceil) {
    last = digits_class(b[0], b[0]) + " " + same_length_range(std::string(n, '0'), br);
    --hi;
  }
  if (lo <= hi)
    alts.push_back(digits_class(lo, hi) + (n > 0 ? fmt::format(" [0-9]{{{}}}", n) : ""));
  if (!last.empty()) alts.push_back(last);
  std::string out;
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return alts.size() == 1 ? out : "( " + out + " )";
}

// Non-negative integers in [lo, hi] (hi < 0: no upper bound, up to 16 digits).
std::string nonneg_range(int64_t lo, int64_t hi) {
  const std::string slo = std::to_string(lo);
  const size_t max_len = hi < 0 ? 16 : std::to_string(hi).size();
  std::vector<std::string> alts;
  int64_t p = 1;
  for (size_t len = 1; len <= max_len; ++len, p *= 10) {
    if (len < slo.size()) continue;
    const int64_t from = len == slo.size() ? lo : p;
    const int64_t to = hi >= 0 && len == max_len ? hi : p * 10 - 1;
    if (from > to) continue;
    alts.push_back(same_length_range(std::to_string(from), std::to_string(to)));
  }
  std::string out;
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return "( " + out + " )";
}

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) {
    for (const auto& p : primitives()) taken_.insert(p.name);
    taken_.insert("root");
  }

  Expected<std::string> run() {
    std::string top;
    SUSTAIN_ASSIGN_OR_RETURN(top, visit(root_, "value", ""));
    std::string out = "root ::= " + top + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  static Status fail(const std::string& path, const std::string& what) {
    return Status(Code::kInvalidArgument,
                  fmt::format("JSON schema: at {}: {}", path.empty() ? "the root" : path, what));
  }

  std::string use(const std::string& name) {
    if (used_.insert(name).second) {
      for (const auto& p : primitives()) {
        if (p.name != name) continue;
        for (const char* d : p.deps) use(d);
        rules_.push_back({name, p.body});
      }
    }
    return name;
  }

  // A new rule name from a hint (its place in the schema).
  std::string reserve(const std::string& hint) {
    std::string base;
    for (char c : hint) {
      const bool ok = std::isalnum(static_cast<unsigned char>(c)) != 0;
      if (ok) {
        base += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      } else if (!base.empty() && base.back() != '-') {
        base += '-';
      }
      if (base.size() >= 32) break;
    }
    while (!base.empty() && base.back() == '-') base.pop_back();
    if (base.empty()) base = "s";
    std::string name = base;
    for (int k = 2; taken_.count(name) != 0; ++k) name = fmt::format("{}-{}", base, k);
    taken_.insert(name);
    return name;
  }

  Expected<std::string> define(const std::string& hint, std::string body) {
    if (rules_.size() > kMaxRules)
      return fail("", fmt::format("the schema needs more than {} grammar rules", kMaxRules));
    const std::string name = reserve(hint);
    rules_.push_back({name, std::move(body)});
    return name;
  }

  Expected<std::string> visit(const json& s, const std::string& hint, const std::string& path) {
    if (++depth_ > kMaxDepth) return fail(path, "the schema nests too deeply");
    auto r = visit_inner(s, hint, path);
    --depth_;
    return r;
  }

  Expected<std::string> visit_inner(const json& s, const std::string& hint,
                                    const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return use("value");
      return fail(path, "the schema 'false' allows no value");
    }
    if (!s.is_object()) return fail(path, fmt::format("a schema must be an object or a boolean"));
    std::vector<std::string> constraining;
    for (const auto& [k, v] : s.items()) {
      if (annotations().count(k) != 0) continue;
      if (handled().count(k) == 0)
        return fail(path, fmt::format("keyword '{}' is not supported", k));
      if (k != "$defs" && k != "definitions") constraining.push_back(k);
    }
    auto only = [&](const char* key, std::initializer_list<const char*> also) -> Status {
      for (const auto& k : constraining) {
        bool ok = k == key;
        for (const char* a : also) ok = ok || k == a;
        if (!ok) return fail(path, fmt::format("'{}' beside '{}' is not supported", key, k));
      }
      return Status::ok();
    };
    if (s.contains("allOf")) {
      json merged;
      SUSTAIN_ASSIGN_OR_RETURN(merged, merge_all_of(s, path));
      return visit(merged, hint, path);
    }
    if (s.contains("$ref")) {
      SUSTAIN_TRY(only("$ref", {}));
      return ref(s["$ref"], path);
    }
    if (s.contains("const")) {
      SUSTAIN_TRY(only("const", {"type"}));
      if (s.contains("type") && !matches_type(s["const"], s["type"]))
        return fail(path, "'const' does not have the schema's 'type'");
      return define(hint, gbnf_literal(s["const"].dump()));
    }
    if (s.contains("enum")) {
      SUSTAIN_TRY(only("enum", {"type"}));
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) return fail(path + "/enum", "must be a non-empty array");
      std::string body;
      for (const auto& v : e) {
        if (s.contains("type") && !matches_type(v, s["type"])) continue;
        body += (body.empty() ? "" : " | ") + gbnf_literal(v.dump());
      }
      if (body.empty()) return fail(path, "no value of 'enum' has the schema's 'type'");
      return define(hint, body);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      SUSTAIN_TRY(only(key, {}));
      const json& alts = s[key];
      if (!alts.is_array() || alts.empty())
        return fail(path + "/" + key, "must be a non-empty array of schemas");
      std::string body;
      for (size_t i = 0; i < alts.size(); ++i) {
        std::string alt;
        SUSTAIN_ASSIGN_OR_RETURN(alt, visit(alts[i], hint + "-" + std::to_string(i),
                                            fmt::format("{}/{}/{}", path, key, i)));
        body += (i ? " | " : "") + alt;
      }
      return define(hint, body);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const auto& x : t) {
          if (!x.is_string()) return fail(path + "/type", "must be a string or strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        return fail(path + "/type", "must be a type name or a non-empty array of them");
      }
    } else {
      types.push_back(infer_type(s));
    }
    std::string body;
    for (const auto& t : types) {
      std::string e;
      SUSTAIN_ASSIGN_OR_RETURN(e, typed(s, t, types.size() > 1 ? hint + "-" + t : hint, path));
      body += (body.empty() ? "" : " | ") + e;
    }
    if (types.size() == 1) return body;
    return define(hint, body);
  }

  static bool matches_type(const json& v, const json& type) {
    auto one = [&](const std::string& t) {
      if (t == "string") return v.is_string();
      if (t == "integer")
        return v.is_number_integer() ||
               (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
      if (t == "number") return v.is_number();
      if (t == "boolean") return v.is_boolean();
      if (t == "null") return v.is_null();
      if (t == "object") return v.is_object();
      if (t == "array") return v.is_array();
      return false;
    };
    if (type.is_string()) return one(type.get<std::string>());
    if (type.is_array())
      for (const auto& t : type)
        if (t.is_string() && one(t.get<std::string>())) return true;
    return false;
  }

  // A schema without "type" that uses one type's keywords gets that type (a
  // narrower grammar, still sound); one with none allows any value.
  static std::string infer_type(const json& s) {
    for (const char* k :
         {"properties", "required", "additionalProperties", "minProperties", "maxProperties"})
      if (s.contains(k)) return "object";
    for (const char* k : {"items", "prefixItems", "minItems", "maxItems"})
      if (s.contains(k)) return "array";
    for (const char* k : {"pattern", "format", "minLength", "maxLength"})
      if (s.contains(k)) return "string";
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (s.contains(k)) return "number";
    return "any";
  }

  Expected<std::string> typed(const json& s, const std::string& t, const std::string& hint,
                              const std::string& path) {
    if (t == "any") return use("value");
    if (t == "string") return string_rule(s, hint, path);
    if (t == "integer") return integer_rule(s, hint, path);
    if (t == "number") return number_rule(s, hint, path);
    if (t == "boolean") return use("boolean");
    if (t == "null") return use("null");
    if (t == "object") return object_rule(s, hint, path);
    if (t == "array") return array_rule(s, hint, path);
    return fail(path + "/type", fmt::format("unknown type '{}'", t));
  }

  Expected<int64_t> count(const json& s, const char* key, const std::string& path) {
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      return fail(path + "/" + key, "must be a non-negative integer");
    if (v.get<int64_t>() > static_cast<int64_t>(kMaxRepetition))
      return fail(path + "/" + key,
                  fmt::format("{} is over the supported limit of {}", v.dump(), kMaxRepetition));
    return v.get<int64_t>();
  }

  // A pair of count keywords (minItems / maxItems and the like) into *lo
  // (0 when absent) and *hi (-1 when absent), the maximum not below the
  // minimum.
  Status count_range(const json& s, const char* min_key, const char* max_key,
                     const std::string& path, int64_t* lo, int64_t* hi) {
    if (s.contains(min_key)) {
      SUSTAIN_ASSIGN_OR_RETURN(*lo, count(s, min_key, path));
    }
    if (s.contains(max_key)) {
      SUSTAIN_ASSIGN_OR_RETURN(*hi, count(s, max_key, path));
    }
    if (*hi >= 0 && *hi < *lo)
      return fail(path, fmt::format("'{}' is below '{}'", max_key, min_key));
    return Status::ok();
  }

  // "{m,n}" (n < 0: unbounded), or "" for {1,1}.
  static std::string reps(int64_t m, int64_t n) {
    if (n < 0) return m == 0 ? "*" : m == 1 ? "+" : fmt::format("{{{},}}", m);
    if (m == 1 && n == 1) return "";
    if (m == 0 && n == 1) return "?";
    return m == n ? fmt::format("{{{}}}", m) : fmt::format("{{{},{}}}", m, n);
  }

  Expected<std::string> string_rule(const json& s, const std::string& hint,
                                    const std::string& path) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern")) {
      if (has_len || s.contains("format"))
        return fail(path,
                    "'pattern' together with 'minLength', 'maxLength' or 'format' is not "
                    "supported");
      if (!s["pattern"].is_string()) return fail(path + "/pattern", "must be a string");
      auto re = regex_to_gbnf(s["pattern"].get<std::string>(), use("json-char"));
      if (!re) return fail(path + "/pattern", re.status().message());
      return define(hint, "\"\\\"\" " + *re + " \"\\\"\"");
    }
    if (s.contains("format")) {
      if (has_len)
        return fail(path, "'format' together with 'minLength'/'maxLength' is not supported");
      if (!s["format"].is_string()) return fail(path + "/format", "must be a string");
      const std::string f = s["format"].get<std::string>();
      if (f != "date-time" && f != "date" && f != "time" && f != "uuid" && f != "email")
        return fail(path + "/format",
                    fmt::format("format '{}' is not supported (date-time, date, time, uuid and "
                                "email are)",
                                f));
      return define(hint, "\"\\\"\" " + use(f) + " \"\\\"\"");
    }
    if (!has_len) return use("string");
    int64_t lo = 0, hi = -1;
    SUSTAIN_TRY(count_range(s, "minLength", "maxLength", path, &lo, &hi));
    if (hi == 0) return define(hint, "\"\\\"\\\"\"");
    return define(hint, "\"\\\"\" " + use("json-char") + reps(lo, hi) + " \"\\\"\"");
  }

  // A value's numeric bounds. Integer bounds are the integers the value may
  // be; `frac_*` bound the integer part n of a value written with a
  // fraction: "n.d…" lies in [n, n + 1), "-m.d…" in (−(m + 1), −m].
  struct Bounds {
    bool has_lo = false, has_hi = false;
    int64_t lo = 0, hi = 0;                  // integers within the bounds
    bool frac_has_hi = false;
    int64_t frac_pos_hi = 0;                 // "n.d…" needs n ≤ this (n + 1 ≤ the maximum)
    bool frac_has_lo = false;
    int64_t frac_neg_hi = 0;                 // "-m.d…" needs m ≤ this (−(m + 1) ≥ the minimum)
    int64_t frac_neg_lo = 0;                 // and m ≥ this (−m within the maximum)
  };

  Expected<Bounds> bounds(const json& s, const std::string& path) {
    Bounds b;
    for (const char* k : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!s.contains(k)) continue;
      const json& v = s[k];
      if (!v.is_number())
        return fail(path + "/" + k, "must be a number (the draft-4 boolean form is not supported)");
      const double x = v.get<double>();
      if (!(std::fabs(x) <= static_cast<double>(kMaxBound)))
        return fail(path + "/" + k,
                    fmt::format("{} is outside the supported range ±{}", v.dump(), kMaxBound));
      const std::string key = k;
      if (key == "minimum" || key == "exclusiveMinimum") {
        const auto i = static_cast<int64_t>(key == "minimum" ? std::ceil(x) : std::floor(x) + 1);
        b.lo = b.has_lo ? std::max(b.lo, i) : i;
        b.has_lo = true;
        // −(m + 1) ≥ x, and the value is above −(m + 1), so either kind holds.
        const auto m = static_cast<int64_t>(std::floor(-x)) - 1;
        b.frac_neg_hi = b.frac_has_lo ? std::min(b.frac_neg_hi, m) : m;
        b.frac_has_lo = true;
      } else {
        const auto i = static_cast<int64_t>(key == "maximum" ? std::floor(x) : std::ceil(x) - 1);
        b.hi = b.has_hi ? std::min(b.hi, i) : i;
        b.has_hi = true;
        // n + 1 ≤ x, and the value is below n + 1, so either kind holds.
        const auto n = static_cast<int64_t>(std::floor(x)) - 1;
        b.frac_pos_hi = b.frac_has_hi ? std::min(b.frac_pos_hi, n) : n;
        b.frac_has_hi = true;
      }
    }
    // −m ≤ max (or < it): the same integers as "-m" alone may be.
    if (b.has_hi) b.frac_neg_lo = std::max<int64_t>(0, -b.hi);
    return b;
  }

  // Integers in [lo, hi] (either side open where it has none); "" when none.
  static std::string integer_range(const Bounds& b) {
    const bool has_lo = b.has_lo, has_hi = b.has_hi;
    const int64_t lo = b.lo, hi = b.hi;
    if (has_lo && has_hi && lo > hi) return "";
    std::vector<std::string> alts;
    // Non-negative part: [max(lo, 0), hi].
    if (!has_hi || hi >= 0)
      alts.push_back(nonneg_range(has_lo ? std::max<int64_t>(lo, 0) : 0, has_hi ? hi : -1));
    // Negative part: -[max(1, -hi), -lo].
    if (!has_lo || lo < 0) {
      const int64_t from = has_hi ? std::max<int64_t>(1, -std::min<int64_t>(hi, -1)) : 1;
      alts.push_back("\"-\" " + nonneg_range(from, has_lo ? -lo : -1));
    }
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
    return body;
  }

  Expected<std::string> integer_rule(const json& s, const std::string& hint,
                                     const std::string& path) {
    Bounds b;
    SUSTAIN_ASSIGN_OR_RETURN(b, bounds(s, path));
    if (!b.has_lo && !b.has_hi) return use("integer");
    const std::string body = integer_range(b);
    if (body.empty()) return fail(path, "no integer lies within the bounds");
    return define(hint, body);
  }

  // A number within its bounds: an integer in range, or an integer part
  // whose whole unit interval is in range followed by a fraction (so
  // "2.5" where the maximum is 3, not "3.5"), never an exponent. Sound but
  // narrower: with a maximum of 3.7, 3.5 cannot be written.
  Expected<std::string> number_rule(const json& s, const std::string& hint,
                                    const std::string& path) {
    Bounds b;
    SUSTAIN_ASSIGN_OR_RETURN(b, bounds(s, path));
    if (!b.has_lo && !b.has_hi) return use("number");
    std::vector<std::string> alts;
    if (std::string i = integer_range(b); !i.empty()) alts.push_back(i);
    const std::string frac = "\".\" [0-9]{1,16}";
    // "n.d…" with n ≥ 0 in [max(lo, 0), frac_pos_hi].
    const int64_t pos_lo = b.has_lo ? std::max<int64_t>(b.lo, 0) : 0;
    if (!b.frac_has_hi || b.frac_pos_hi >= pos_lo)
      alts.push_back(nonneg_range(pos_lo, b.frac_has_hi ? b.frac_pos_hi : -1) + " " + frac);
    // "-m.d…" with m in [frac_neg_lo, frac_neg_hi].
    if (!b.frac_has_lo || b.frac_neg_hi >= b.frac_neg_lo)
      alts.push_back("\"-\" " + nonneg_range(b.frac_neg_lo, b.frac_has_lo ? b.frac_neg_hi : -1) +
                     " " + frac);
    if (alts.empty()) return fail(path, "no number lies within the bounds");
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
    return define(hint, body);
  }

  Expected<std::string> array_rule(const json& s, const std::string& hint,
                                   const std::string& path) {
    if (s.contains("prefixItems")) return tuple_rule(s, hint, path);
    std::string item;
    if (!s.contains("items")) {
      item = use("value");
    } else {
      if (s["items"].is_array())
        return fail(path + "/items",
                    "'items' as an array (a draft-4 tuple) is not supported; 'prefixItems' is");
      SUSTAIN_ASSIGN_OR_RETURN(item, visit(s["items"], hint + "-item", path + "/items"));
    }
    int64_t lo = 0, hi = -1;
    SUSTAIN_TRY(count_range(s, "minItems", "maxItems", path, &lo, &hi));
    const std::string ws = use("ws");
    if (hi == 0) return define(hint, "\"[\" " + ws + " \"]\"");
    const std::string more = fmt::format("( \",\" {} {} {} )", ws, item, ws);
    const int64_t rest_hi = hi < 0 ? -1 : hi - 1;
    if (lo == 0)
      return define(hint, fmt::format("\"[\" {} ( {} {} {}{} )? \"]\"", ws, item, ws, more,
                                      reps(0, rest_hi)));
    return define(
        hint, fmt::format("\"[\" {} {} {} {}{} \"]\"", ws, item, ws, more, reps(lo - 1, rest_hi)));
  }

  // A tuple (prefixItems): every listed item, in order, then the items
  // `items` allows (none where it is false or absent, unless minItems asks
  // for more; then any value where it is absent). Listed items are optional
  // in JSON Schema; the grammar writes them all, which is narrower and
  // still valid.
  Expected<std::string> tuple_rule(const json& s, const std::string& hint,
                                   const std::string& path) {
    const json& prefix = s["prefixItems"];
    if (!prefix.is_array() || prefix.empty())
      return fail(path + "/prefixItems", "must be a non-empty array of schemas");
    const auto n = static_cast<int64_t>(prefix.size());
    int64_t lo = 0, hi = -1;
    SUSTAIN_TRY(count_range(s, "minItems", "maxItems", path, &lo, &hi));
    if (hi >= 0 && hi < n)
      return fail(path, fmt::format("'maxItems' {} is below the {} 'prefixItems' (a tuple cut "
                                    "short is not supported)",
                                    hi, n));
    const std::string ws = use("ws");
    std::string body = "\"[\" " + ws;
    for (int64_t i = 0; i < n; ++i) {
      std::string item;
      SUSTAIN_ASSIGN_OR_RETURN(item, visit(prefix[static_cast<size_t>(i)],
                                           fmt::format("{}-{}", hint, i),
                                           fmt::format("{}/prefixItems/{}", path, i)));
      body += (i ? " \",\" " + ws + " " : " ") + item + " " + ws;
    }
    const int64_t rest_lo = std::max<int64_t>(lo - n, 0);
    std::string rest;
    int64_t rest_hi = hi < 0 ? -1 : hi - n;
    if (s.contains("items") && !(s["items"].is_boolean() && !s["items"].get<bool>())) {
      SUSTAIN_ASSIGN_OR_RETURN(rest, visit(s["items"], hint + "-item", path + "/items"));
    } else if (!s.contains("items") && rest_lo > 0) {
      rest = use("value");
      rest_hi = rest_lo;
    } else if (rest_lo > 0) {
      return fail(path, "'minItems' asks for more items than 'prefixItems' lists, and 'items' "
                        "is false");
    } else {
      rest_hi = 0;
    }
    if (!rest.empty() && rest_hi != 0)
      body += fmt::format(" ( \",\" {} {} {} ){}", ws, rest, ws,
                          reps(rest_lo, rest_hi).empty() ? "" : reps(rest_lo, rest_hi));
    return define(hint, body + " \"]\"");
  }

  // The content of a JSON string (unescaped characters only) that is none
  // of `names`: a trie of the names where each node may end (unless it is a
  // name), take a child, or take any other character and then up to 31 more
  // (extra keys are bounded, so a model cannot write one key forever).
  Expected<std::string> key_not_in(const std::vector<std::string>& names, const std::string& hint) {
    struct Node {
      std::map<uint32_t, size_t> next;
      bool name = false;
    };
    std::vector<Node> trie(1);
    for (const auto& n : names) {
      size_t at = 0;
      bool plain = true;
      std::vector<uint32_t> cps;
      for (size_t i = 0; i < n.size();) {
        const auto c = static_cast<unsigned char>(n[i]);
        const int len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        uint32_t v = len == 1 ? c : c & (0x7F >> len);
        for (int k = 1; k < len && i + k < n.size(); ++k)
          v = (v << 6) | (static_cast<unsigned char>(n[i + k]) & 0x3F);
        i += static_cast<size_t>(len);
        if (v < 0x20 || v == '"' || v == '\\') plain = false;
        cps.push_back(v);
      }
      if (!plain) continue;  // the key grammar cannot write it anyway
      for (uint32_t c : cps) {
        auto it = trie[at].next.find(c);
        if (it == trie[at].next.end()) {
          trie.emplace_back();
          it = trie[at].next.emplace(c, trie.size() - 1).first;
        }
        at = it->second;
      }
      trie[at].name = true;
    }
    const std::string any = use("plain-char");
    std::vector<std::string> rule_names(trie.size());
    for (size_t i = 0; i < trie.size(); ++i) rule_names[i] = reserve(hint + "-key");
    for (size_t i = 0; i < trie.size(); ++i) {
      std::vector<std::string> alts;
      if (!trie[i].name) alts.push_back("\"\"");
      std::string other = "[^\"\\\\\\x00-\\x1F";
      for (const auto& [c, child] : trie[i].next) {
        alts.push_back(fmt::format("[{}] {}", gbnf_class_char(c), rule_names[child]));
        other += gbnf_class_char(c);
      }
      alts.push_back(other + "] " + any + "{0,31}");
      std::string body;
      for (size_t k = 0; k < alts.size(); ++k) body += (k ? " | " : "") + alts[k];
      rules_.push_back({rule_names[i], body});
    }
    return rule_names[0];
  }

  Expected<std::string> object_rule(const json& s, const std::string& hint,
                                    const std::string& path) {
    const json* props = s.contains("properties") ? &s["properties"] : nullptr;
    if (props != nullptr && !props->is_object())
      return fail(path + "/properties", "must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return fail(path + "/required", "must be an array");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) return fail(path + "/required", "must hold strings");
        required.insert(r.get<std::string>());
      }
    }
    const json* addl = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    const bool addl_false = addl != nullptr && addl->is_boolean() && !addl->get<bool>();
    int64_t min_props = 0, max_props = -1;
    SUSTAIN_TRY(count_range(s, "minProperties", "maxProperties", path, &min_props, &max_props));
    const bool counted = min_props > 0 || max_props >= 0;
    if (props == nullptr && required.empty() && !counted &&
        (addl == nullptr || *addl == json(true)))
      return use("object");
    const std::string ws = use("ws");
    struct Prop {
      std::string name, kv;
      bool required;
    };
    std::vector<Prop> list;
    std::vector<std::string> names;
    std::string extra_value;
    if (addl != nullptr && !addl_false) {
      SUSTAIN_ASSIGN_OR_RETURN(extra_value,
                               visit(*addl, hint + "-extra", path + "/additionalProperties"));
    }
    auto add_prop = [&](const std::string& name, const std::string& value) -> Status {
      std::string kv;
      SUSTAIN_ASSIGN_OR_RETURN(
          kv,
          define(hint + "-" + name + "-kv",
                 fmt::format("{} {} \":\" {} {}", gbnf_literal(json(name).dump()), ws, ws, value)));
      list.push_back({name, kv, required.count(name) != 0});
      names.push_back(name);
      return Status::ok();
    };
    if (props != nullptr) {
      for (const auto& [name, sub] : props->items()) {
        std::string value;
        SUSTAIN_ASSIGN_OR_RETURN(value,
                                 visit(sub, hint + "-" + name, path + "/properties/" + name));
        SUSTAIN_TRY(add_prop(name, value));
      }
    }
    for (const auto& r : required) {
      if (props != nullptr && props->contains(r)) continue;
      if (addl_false)
        return fail(path, fmt::format("property '{}' is required, but 'additionalProperties' is "
                                      "false and 'properties' does not list it",
                                      r));
      SUSTAIN_TRY(add_prop(r, extra_value.empty() ? use("value") : extra_value));
    }
    // minProperties / maxProperties choose among the declared properties:
    // the first optional ones become required until there are enough, and
    // past the maximum the last optional ones and any extras are left out
    // (narrower than the schema, still valid).
    if (counted) {
      int64_t req = 0;
      for (const auto& p : list) req += p.required ? 1 : 0;
      for (auto& p : list)
        if (req < min_props && !p.required) {
          p.required = true;
          ++req;
        }
      if (req < min_props)
        return fail(path, fmt::format("'minProperties' {} asks for more than the {} properties "
                                      "'properties' and 'required' declare (extra keys are not "
                                      "generated to fill it)",
                                      min_props, list.size()));
      if (max_props >= 0) {
        if (req > max_props)
          return fail(path, fmt::format("'maxProperties' {} is below the {} properties that "
                                        "must be written",
                                        max_props, req));
        int64_t room = max_props - req;
        std::vector<Prop> kept;
        for (const auto& p : list)
          if (p.required || room-- > 0) kept.push_back(p);
        list = std::move(kept);
        extra_value.clear();
      }
    }
    // rest_i: the properties from i on after something was written (each
    // preceded by a comma); first_i: the same with nothing written yet.
    const size_t n = list.size();
    std::string rest_next, first_next;
    if (!extra_value.empty()) {
      std::string key;
      SUSTAIN_ASSIGN_OR_RETURN(key, key_not_in(names, hint));
      std::string extra_kv;
      SUSTAIN_ASSIGN_OR_RETURN(
          extra_kv, define(hint + "-extra-kv", fmt::format("\"\\\"\" {} \"\\\"\" {} \":\" {} {}",
                                                           key, ws, ws, extra_value)));
      SUSTAIN_ASSIGN_OR_RETURN(
          rest_next, define(hint + "-rest", fmt::format("( \",\" {} {} {} )*", ws, extra_kv, ws)));
      SUSTAIN_ASSIGN_OR_RETURN(
          first_next,
          define(hint + "-first", fmt::format("( {} {} {} )?", extra_kv, ws, rest_next)));
    }
    for (size_t i = n; i-- > 0;) {
      const Prop& p = list[i];
      const std::string tail = rest_next.empty() ? "" : " " + rest_next;
      const std::string item = fmt::format("\",\" {} {} {}", ws, p.kv, ws);
      std::string rest_body = p.required ? item + tail : "( " + item + " )?" + tail;
      std::string first_body = p.kv + " " + ws + tail;
      if (!p.required) first_body += " | " + (first_next.empty() ? "\"\"" : first_next);
      std::string rest_i, first_i;
      SUSTAIN_ASSIGN_OR_RETURN(rest_i, define(hint + "-rest", rest_body));
      SUSTAIN_ASSIGN_OR_RETURN(first_i, define(hint + "-first", first_body));
      rest_next = rest_i;
      first_next = first_i;
    }
    return define(hint,
                  fmt::format("\"{{\" {} {} \"}}\"", ws, first_next.empty() ? "" : first_next));
  }

  // allOf (with the schema's other keywords as one more part) merged into
  // one schema: types intersected, properties united (a property in several
  // parts gets the allOf of its schemas), required united, bounds taken at
  // their tightest, enums intersected. A part whose additionalProperties is
  // false keeps every other part's extra properties out, as JSON Schema
  // says. Parts are resolved through $ref first. A keyword that two parts
  // set differently and that cannot be merged (two patterns, two anyOfs) is
  // an error naming it.
  Expected<json> merge_all_of(const json& s, const std::string& path) {
    const json& all = s["allOf"];
    if (!all.is_array() || all.empty())
      return fail(path + "/allOf", "must be a non-empty array of schemas");
    std::vector<json> parts;
    json self = s;
    self.erase("allOf");
    parts.push_back(std::move(self));
    for (size_t i = 0; i < all.size(); ++i) {
      const std::string at = fmt::format("{}/allOf/{}", path, i);
      const json* part = &all[i];
      for (int hops = 0; part->is_object() && part->contains("$ref"); ++hops) {
        if (part->size() != 1 || hops > 16)
          return fail(at, "a '$ref' inside 'allOf' must stand alone and resolve within 16 steps");
        const json& r = (*part)["$ref"];
        if (!r.is_string() || r.get<std::string>().rfind('#', 0) != 0)
          return fail(at + "/$ref", "must be a local reference ('#...')");
        json::json_pointer jp;
        try {
          jp = json::json_pointer(r.get<std::string>().substr(1));
        } catch (const json::exception&) {
          return fail(at + "/$ref", "is not a valid JSON pointer");
        }
        if (!root_.contains(jp)) return fail(at + "/$ref", "does not resolve");
        part = &root_.at(jp);
      }
      if (part->is_boolean()) {
        if (!part->get<bool>()) return fail(at, "the schema 'false' allows no value");
        continue;
      }
      if (!part->is_object()) return fail(at, "a schema must be an object or a boolean");
      if (part->contains("allOf")) {
        json inner;
        SUSTAIN_ASSIGN_OR_RETURN(inner, merge_all_of(*part, at));
        parts.push_back(std::move(inner));
      } else {
        parts.push_back(*part);
      }
    }
    // Keys every closed part (additionalProperties false) allows.
    std::optional<std::set<std::string>> allowed;
    int object_parts = 0;
    bool schema_addl = false;
    for (const json& p : parts) {
      bool object_like = false;
      for (const char* k : {"properties", "required", "additionalProperties"})
        object_like = object_like || p.contains(k);
      object_parts += object_like ? 1 : 0;
      if (!p.contains("additionalProperties")) continue;
      const json& a = p["additionalProperties"];
      if (a.is_boolean() && !a.get<bool>()) {
        std::set<std::string> keys;
        if (p.contains("properties") && p["properties"].is_object())
          for (const auto& [k, v] : p["properties"].items()) keys.insert(k);
        if (allowed) {
          std::set<std::string> both;
          for (const auto& k : keys)
            if (allowed->count(k) != 0) both.insert(k);
          allowed = std::move(both);
        } else {
          allowed = std::move(keys);
        }
      } else if (!a.is_boolean()) {
        schema_addl = true;
      }
    }
    if (schema_addl && object_parts > 1)
      return fail(path + "/allOf",
                  "an 'additionalProperties' schema in one part of several object parts is not "
                  "supported");
    json out = json::object();
    for (const json& p : parts) {
      for (const auto& [k, v] : p.items()) {
        if (annotations().count(k) != 0 || k == "$defs" || k == "definitions") continue;
        if (!out.contains(k)) {
          out[k] = v;
          continue;
        }
        json& o = out[k];
        if (o == v) continue;
        if (k == "properties") {
          if (!o.is_object() || !v.is_object())
            return fail(path + "/allOf", "'properties' must be objects");
          for (const auto& [name, sub] : v.items())
            o[name] = o.contains(name) ? json{{"allOf", json::array({o[name], sub})}} : sub;
        } else if (k == "required") {
          if (!o.is_array() || !v.is_array())
            return fail(path + "/allOf", "'required' must be arrays");
          for (const auto& r : v)
            if (std::find(o.begin(), o.end(), r) == o.end()) o.push_back(r);
        } else if (k == "type") {
          auto names = [](const json& t) {
            std::set<std::string> n;
            if (t.is_string()) n.insert(t.get<std::string>());
            if (t.is_array())
              for (const auto& x : t)
                if (x.is_string()) n.insert(x.get<std::string>());
            return n;
          };
          const auto a = names(o), b = names(v);
          json both = json::array();
          for (const auto& t : a) {
            if (b.count(t) != 0) both.push_back(t);
            else if (t == "number" && b.count("integer") != 0) both.push_back("integer");
            else if (t == "integer" && b.count("number") != 0) both.push_back("integer");
          }
          if (both.empty())
            return fail(path + "/allOf",
                        fmt::format("the parts' types {} and {} have no value in common", o.dump(),
                                    v.dump()));
          o = both.size() == 1 ? both[0] : both;
        } else if (k == "minimum" || k == "exclusiveMinimum" || k == "minLength" ||
                   k == "minItems" || k == "minProperties") {
          if (!o.is_number() || !v.is_number()) return fail(path + "/allOf", "'" + k + "' must be a number");
          if (v.get<double>() > o.get<double>()) o = v;
        } else if (k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" ||
                   k == "maxItems" || k == "maxProperties") {
          if (!o.is_number() || !v.is_number()) return fail(path + "/allOf", "'" + k + "' must be a number");
          if (v.get<double>() < o.get<double>()) o = v;
        } else if (k == "enum") {
          if (!o.is_array() || !v.is_array()) return fail(path + "/allOf", "'enum' must be arrays");
          json both = json::array();
          for (const auto& x : o)
            if (std::find(v.begin(), v.end(), x) != v.end()) both.push_back(x);
          if (both.empty()) return fail(path + "/allOf", "the parts' enums have no value in common");
          o = both;
        } else if (k == "items" && o.is_object() && v.is_object()) {
          o = json{{"allOf", json::array({o, v})}};
        } else if (k == "additionalProperties") {
          // false wins; a schema beside true stays (several object parts
          // with a schema were refused above).
          if ((o.is_boolean() && !o.get<bool>()) || (v.is_boolean() && !v.get<bool>()))
            o = false;
          else if (o.is_boolean())
            o = v;
        } else {
          return fail(path + "/allOf",
                      fmt::format("'{}' in more than one part, with different values, is not "
                                  "supported",
                                  k));
        }
      }
    }
    SUSTAIN_TRY(fold_into_enum(out, path));
    if (allowed) {
      if (out.contains("properties")) {
        json kept = json::object();
        for (const auto& [name, sub] : out["properties"].items())
          if (allowed->count(name) != 0) kept[name] = sub;
        out["properties"] = std::move(kept);
      }
      if (out.contains("required"))
        for (const auto& r : out["required"])
          if (r.is_string() && allowed->count(r.get<std::string>()) == 0)
            return fail(path + "/allOf",
                        fmt::format("property '{}' is required, but a part whose "
                                    "'additionalProperties' is false does not list it",
                                    r.get<std::string>()));
      out["additionalProperties"] = false;
    }
    return out;
  }

  // A merged enum or const beside bounds from other parts: the values that
  // meet the bounds stay, and the bounds go (each applies to its own kind
  // of value, as JSON Schema says: a minimum says nothing of a string).
  // Other keywords beside an enum stay, and are refused as before.
  Status fold_into_enum(json& out, const std::string& path) {
    if (!out.contains("enum") && !out.contains("const")) return Status::ok();
    static const std::set<std::string> foldable = {
        "minimum",   "maximum",   "exclusiveMinimum", "exclusiveMaximum", "minLength",
        "maxLength", "minItems",  "maxItems",         "minProperties",    "maxProperties"};
    auto within = [&](const json& v) {
      for (const auto& [k, b] : out.items()) {
        if (foldable.count(k) == 0 || !b.is_number()) continue;
        const double x = b.get<double>();
        double n = 0;
        if (k.find("Length") != std::string::npos) {
          if (!v.is_string()) continue;
          const std::string& t = v.get_ref<const std::string&>();
          for (unsigned char c : t) n += (c & 0xC0) != 0x80 ? 1 : 0;
        } else if (k.find("Items") != std::string::npos) {
          if (!v.is_array()) continue;
          n = static_cast<double>(v.size());
        } else if (k.find("Properties") != std::string::npos) {
          if (!v.is_object()) continue;
          n = static_cast<double>(v.size());
        } else {
          if (!v.is_number()) continue;
          n = v.get<double>();
        }
        const bool ok = k.rfind("min", 0) == 0          ? n >= x
                        : k.rfind("max", 0) == 0        ? n <= x
                        : k == "exclusiveMinimum" ? n > x
                                                  : n < x;
        if (!ok) return false;
      }
      return true;
    };
    const char* key = out.contains("const") ? "const" : "enum";
    json values = out.contains("const") ? json::array({out["const"]}) : out["enum"];
    if (!values.is_array()) return Status::ok();
    json kept = json::array();
    for (const auto& v : values)
      if (within(v)) kept.push_back(v);
    if (kept.empty())
      return fail(path + "/allOf", fmt::format("no value of '{}' meets the other parts' bounds", key));
    if (out.contains("const")) {
      out["const"] = kept[0];
    } else {
      out["enum"] = kept;
    }
    for (const auto& k : foldable) out.erase(k);
    return Status::ok();
  }

  Expected<std::string> ref(const json& r, const std::string& path) {
    if (!r.is_string()) return fail(path + "/$ref", "must be a string");
    const std::string target = r.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    if (target.empty() || target[0] != '#')
      return fail(
          path + "/$ref",
          fmt::format("'{}' is not a local reference; only '#...' ones are supported", target));
    std::string pointer = target.substr(1);
    const json* at = &root_;
    std::string last = "ref";
    if (!pointer.empty()) {
      json::json_pointer jp;
      try {
        jp = json::json_pointer(pointer);
      } catch (const json::exception&) {
        return fail(path + "/$ref", fmt::format("'{}' is not a valid JSON pointer", target));
      }
      if (!root_.contains(jp))
        return fail(path + "/$ref", fmt::format("'{}' does not resolve", target));
      at = &root_.at(jp);
      last = jp.back();
    }
    // Named before it is visited, so a schema that refers to itself becomes
    // a recursive rule.
    const std::string name = reserve(last);
    refs_[target] = name;
    std::string body;
    SUSTAIN_ASSIGN_OR_RETURN(body, visit(*at, name + "-body", target));
    rules_.push_back({name, body});
    return name;
  }

  static constexpr size_t kMaxRules = 20000;
  static constexpr int kMaxDepth = 64;
  const json& root_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> used_, taken_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
};

// "root ::= <name>" and the primitives it needs.
std::string primitive_grammar(const std::string& root) {
  std::string out = "root ::= " + root + "\n";
  std::set<std::string> seen;
  std::function<void(const std::string&)> add = [&](const std::string& name) {
    if (!seen.insert(name).second) return;
    for (const auto& p : primitives())
      if (p.name == name) {
        for (const char* d : p.deps) add(d);
        out += name + " ::= " + p.body + "\n";
      }
  };
  add(root);
  return out;
}

}  // namespace

Expected<std::string> schema_to_gbnf(const json& schema) {
  Converter c(schema);
  return c.run();
}

Expected<Grammar> compile_json_schema(const json& schema) {
  std::string text;
  SUSTAIN_ASSIGN_OR_RETURN(text, schema_to_gbnf(schema));
  auto g = parse_gbnf(text);
  if (!g)
    return Status(Code::kInvalidArgument, "JSON schema: it cannot be turned into a grammar (" +
                                              g.status().message() +
                                              "); a '$ref' that refers to itself before any text?");
  return g;
}

const std::string& json_object_gbnf() {
  static const std::string text = primitive_grammar("object");
  return text;
}

const std::string& json_value_gbnf() {
  static const std::string text = primitive_grammar("value");
  return text;
}

}  // namespace sustain::grammar
