#include "schema_check.h"

#include <cmath>
#include <regex>

#include <fmt/format.h>

namespace sustain::grammar::test {
namespace {

using json = nlohmann::ordered_json;

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_type(const json& v, const std::string& t) {
  if (t == "string") return v.is_string();
  if (t == "integer")
    return v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                     std::trunc(v.get<double>()) == v.get<double>());
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  return false;
}

bool leap(int y) {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

bool valid_date(const std::string& s) {
  static const std::regex re(R"(^(\d{4})-(\d{2})-(\d{2})$)");
  std::smatch m;
  if (!std::regex_match(s, m, re)) return false;
  const int y = std::stoi(m[1]), mo = std::stoi(m[2]), d = std::stoi(m[3]);
  static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (mo < 1 || mo > 12 || d < 1) return false;
  return d <= days[mo - 1] + (mo == 2 && leap(y) ? 1 : 0);
}

bool valid_time(const std::string& s) {
  // RFC 3339 full-time; a leap second (60) is allowed by the RFC.
  static const std::regex re(
      R"(^([01]\d|2[0-3]):([0-5]\d):([0-5]\d|60)(\.\d+)?([zZ]|[+-]([01]\d|2[0-3]):[0-5]\d)$)");
  return std::regex_match(s, re);
}

bool valid_format(const std::string& f, const std::string& s) {
  if (f == "date") return valid_date(s);
  if (f == "time") return valid_time(s);
  if (f == "date-time") {
    const size_t t = s.find_first_of("Tt");
    return t != std::string::npos && valid_date(s.substr(0, t)) && valid_time(s.substr(t + 1));
  }
  if (f == "uuid") {
    static const std::regex re(
        R"(^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$)");
    return std::regex_match(s, re);
  }
  if (f == "email") {
    // RFC 5321 dot-atom local part @ a domain of at least two labels.
    static const std::regex re(
        R"(^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?$)");
    return std::regex_match(s, re);
  }
  return false;
}

const json* resolve(const json& root, const std::string& ref) {
  if (ref == "#") return &root;
  if (ref.rfind("#/", 0) != 0) return nullptr;
  const json::json_pointer p(ref.substr(1));
  return root.contains(p) ? &root.at(p) : nullptr;
}

}  // namespace

std::string validate(const json& v, const json& s, const json& root, const std::string& path) {
  if (s.is_boolean()) return s.get<bool>() ? "" : path + ": schema false";
  if (s.contains("$ref")) {
    const json* target = resolve(root, s["$ref"].get<std::string>());
    if (target == nullptr) return path + ": unresolvable $ref";
    return validate(v, *target, root, path);
  }
  if (s.contains("const") && v != s["const"]) return path + ": is not the const";
  if (s.contains("enum")) {
    bool found = false;
    for (const auto& e : s["enum"]) found = found || e == v;
    if (!found) return path + ": not in enum";
  }
  if (s.contains("anyOf")) {
    bool any = false;
    for (const auto& a : s["anyOf"]) any = any || validate(v, a, root, path).empty();
    if (!any) return path + ": matches no anyOf alternative";
  }
  if (s.contains("allOf"))
    for (const auto& a : s["allOf"])
      if (auto e = validate(v, a, root, path); !e.empty()) return e;
  if (s.contains("oneOf")) {
    int n = 0;
    for (const auto& a : s["oneOf"]) n += validate(v, a, root, path).empty();
    if (n != 1) return fmt::format("{}: matches {} oneOf alternatives", path, n);
  }
  if (s.contains("type")) {
    const json& t = s["type"];
    bool ok = false;
    if (t.is_string()) ok = is_type(v, t.get<std::string>());
    for (const auto& x : t.is_array() ? t : json::array())
      ok = ok || is_type(v, x.get<std::string>());
    if (!ok) return path + ": wrong type for " + t.dump();
  }
  if (v.is_object()) {
    const json empty = json::object();
    const json& props = s.contains("properties") ? s["properties"] : empty;
    for (const auto& [k, sub] : v.items()) {
      if (props.contains(k)) {
        if (auto e = validate(sub, props[k], root, path + "." + k); !e.empty()) return e;
      } else if (s.contains("additionalProperties")) {
        if (auto e = validate(sub, s["additionalProperties"], root, path + "." + k); !e.empty())
          return e;
      }
    }
    if (s.contains("required"))
      for (const auto& r : s["required"])
        if (!v.contains(r.get<std::string>())) return path + ": missing " + r.get<std::string>();
    if (s.contains("minProperties") && v.size() < s["minProperties"].get<size_t>())
      return path + ": too few properties";
    if (s.contains("maxProperties") && v.size() > s["maxProperties"].get<size_t>())
      return path + ": too many properties";
  }
  if (v.is_array()) {
    // prefixItems: item i against schema i; items: the items after them.
    size_t first = 0;
    if (s.contains("prefixItems")) {
      const json& p = s["prefixItems"];
      for (; first < p.size() && first < v.size(); ++first)
        if (auto e = validate(v[first], p[first], root, fmt::format("{}[{}]", path, first));
            !e.empty())
          return e;
      first = p.size();
    }
    if (s.contains("items"))
      for (size_t i = first; i < v.size(); ++i)
        if (auto e = validate(v[i], s["items"], root, fmt::format("{}[{}]", path, i)); !e.empty())
          return e;
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return path + ": too few";
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>())
      return path + ": too many";
  }
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    const size_t n = code_points(str);
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return path + ": too short";
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return path + ": too long";
    if (s.contains("pattern") && !std::regex_search(str, std::regex(s["pattern"].get<std::string>(),
                                                                    std::regex::ECMAScript)))
      return path + ": does not match the pattern";
    if (s.contains("format") && !valid_format(s["format"].get<std::string>(), str))
      return path + ": not a valid " + s["format"].get<std::string>();
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && !(x >= s["minimum"].get<double>()))
      return path + ": below minimum";
    if (s.contains("maximum") && !(x <= s["maximum"].get<double>()))
      return path + ": above maximum";
    if (s.contains("exclusiveMinimum") && !(x > s["exclusiveMinimum"].get<double>()))
      return path + ": not above exclusiveMinimum";
    if (s.contains("exclusiveMaximum") && !(x < s["exclusiveMaximum"].get<double>()))
      return path + ": not below exclusiveMaximum";
  }
  return "";
}

}  // namespace sustain::grammar::test
