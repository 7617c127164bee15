#include "plan/parse.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

namespace sustain::plan {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A finite non-negative decimal number making up all of `s`.
bool parse_number(std::string_view s, double& out) {
  if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.')) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && std::isfinite(out) && out >= 0;
}

std::vector<std::string_view> split_commas(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    parts.push_back(
        trim(s.substr(start, comma == std::string_view::npos ? s.npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return parts;
}

}  // namespace

Expected<uint64_t> parse_bytes(std::string_view s, std::string_view flag) {
  const std::string_view v = trim(s);
  size_t i = 0;
  while (i < v.size() && (std::isdigit(static_cast<unsigned char>(v[i])) || v[i] == '.')) ++i;
  const std::string_view num = v.substr(0, i);
  const std::string unit = lower(trim(v.substr(i)));
  struct Unit {
    const char* name;
    double scale;
  };
  static const Unit kUnits[] = {
      {"", 1},         {"b", 1},      {"k", 0x1p10},   {"kib", 0x1p10}, {"m", 0x1p20},
      {"mib", 0x1p20}, {"g", 0x1p30}, {"gib", 0x1p30}, {"t", 0x1p40},   {"tib", 0x1p40},
      {"kb", 1e3},     {"mb", 1e6},   {"gb", 1e9},     {"tb", 1e12},
  };
  const Unit* u = nullptr;
  for (const Unit& x : kUnits)
    if (unit == x.name) u = &x;
  double x = 0;
  if (num.empty() || !parse_number(num, x) || !u)
    return error(Code::kInvalidArgument,
                 "{} '{}' is not a size (use bytes, or a number with K, M, G, T, KiB..TiB or "
                 "KB..TB, e.g. 16G)",
                 flag, s);
  if (u->scale == 1 && num.find('.') != std::string_view::npos)
    return error(Code::kInvalidArgument, "{} '{}': a byte count must be a whole number", flag, s);
  const double bytes = std::floor(x * u->scale);
  if (bytes >= 0x1p63) return error(Code::kInvalidArgument, "{} '{}' is too large", flag, s);
  return static_cast<uint64_t>(bytes);
}

Expected<std::vector<uint64_t>> parse_byte_list(std::string_view s, std::string_view flag) {
  std::vector<uint64_t> out;
  for (std::string_view part : split_commas(s)) {
    if (part.empty()) return error(Code::kInvalidArgument, "{} '{}' has an empty entry", flag, s);
    SUSTAIN_ASSIGN_OR_RETURN(uint64_t b, parse_bytes(part, flag));
    if (b == 0) return error(Code::kInvalidArgument, "{} '{}': a size of 0 bytes", flag, s);
    out.push_back(b);
  }
  return out;
}

Expected<std::vector<double>> parse_number_list(std::string_view s, std::string_view flag) {
  std::vector<double> out;
  for (std::string_view part : split_commas(s)) {
    double x = 0;
    if (!parse_number(part, x) || x <= 0)
      return error(
          Code::kInvalidArgument,
          "{} '{}': '{}' is not a positive number (give a comma-separated list, e.g. 2,1.5)", flag,
          s, part);
    out.push_back(x);
  }
  return out;
}

Expected<double> parse_percent(std::string_view s, std::string_view flag) {
  std::string_view v = trim(s);
  if (!v.empty() && v.back() == '%') v = trim(v.substr(0, v.size() - 1));
  double x = 0;
  if (!parse_number(v, x) || x >= 100)
    return error(Code::kInvalidArgument,
                 "{} '{}' is not a percentage from 0 to below 100 (e.g. 15%)", flag, s);
  return x / 100.0;
}

Expected<Split> parse_split(std::string_view s, std::string_view flag) {
  const std::string v = lower(trim(s));
  if (v == "layer") return Split::kLayer;
  // "row" is llama.cpp's name for the same split (its -sm row).
  if (v == "tensor" || v == "row") return Split::kTensor;
  return error(Code::kInvalidArgument, "{} '{}' is not a split mode (layer or tensor)", flag, s);
}

}  // namespace sustain::plan
