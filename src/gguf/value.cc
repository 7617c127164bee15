// Value helpers: type names, array constructors, and the shared detail:: functions.
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "gguf/detail.h"
#include "gguf/gguf.h"

namespace sustain::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
      return "uint8";
    case ValueType::kInt8:
      return "int8";
    case ValueType::kUint16:
      return "uint16";
    case ValueType::kInt16:
      return "int16";
    case ValueType::kUint32:
      return "uint32";
    case ValueType::kInt32:
      return "int32";
    case ValueType::kFloat32:
      return "float32";
    case ValueType::kBool:
      return "bool";
    case ValueType::kString:
      return "string";
    case ValueType::kArray:
      return "array";
    case ValueType::kUint64:
      return "uint64";
    case ValueType::kInt64:
      return "int64";
    case ValueType::kFloat64:
      return "float64";
  }
  return "invalid";
}

Value Value::str_array(const std::vector<std::string>& xs) {
  std::vector<Value> items;
  items.reserve(xs.size());
  for (const auto& s : xs) items.push_back(Value::str(s));
  return array(ValueType::kString, std::move(items));
}

Value Value::f32_array(const std::vector<float>& xs) {
  std::vector<Value> items;
  items.reserve(xs.size());
  for (float x : xs) items.push_back(Value::f32(x));
  return array(ValueType::kFloat32, std::move(items));
}

Value Value::i32_array(const std::vector<int32_t>& xs) {
  std::vector<Value> items;
  items.reserve(xs.size());
  for (int32_t x : xs) items.push_back(Value::i32(x));
  return array(ValueType::kInt32, std::move(items));
}

namespace detail {

std::optional<ValueType> value_type_from_id(uint32_t id) {
  if (id > static_cast<uint32_t>(ValueType::kFloat64)) return std::nullopt;
  return static_cast<ValueType>(id);
}

uint32_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool:
      return 1;
    case ValueType::kUint16:
    case ValueType::kInt16:
      return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32:
      return 4;
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64:
      return 8;
    case ValueType::kString:
    case ValueType::kArray:
      return 0;
  }
  return 0;
}

uint64_t min_encoded_size(ValueType t) {
  if (t == ValueType::kString) return 8;  // u64 length, possibly empty
  if (t == ValueType::kArray) return 12;  // u32 element type + u64 count
  return scalar_size(t);
}

std::string describe(const Value& v) {
  if (v.type == ValueType::kArray) {
    const auto* a = std::get_if<Array>(&v.v);
    if (a == nullptr) return "an array";
    return std::string("an array of ") + value_type_name(a->elem_type);
  }
  const char* name = value_type_name(v.type);
  // "an int8", "an invalid" but "a uint8", "a string".
  bool vowel = name[0] == 'i';
  return std::string(vowel ? "an " : "a ") + name;
}

std::string printable(std::string_view s) {
  constexpr size_t kMaxShown = 200;
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += static_cast<char>(c);
  }
  if (s.size() > kMaxShown) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

namespace {

template <typename T>
bool unsigned_fits(const Value& v) {
  const auto* x = std::get_if<uint64_t>(&v.v);
  return x != nullptr && *x <= std::numeric_limits<T>::max();
}

template <typename T>
bool signed_fits(const Value& v) {
  const auto* x = std::get_if<int64_t>(&v.v);
  return x != nullptr && *x >= std::numeric_limits<T>::min() && *x <= std::numeric_limits<T>::max();
}

}  // namespace

bool value_consistent(const Value& v) {
  switch (v.type) {
    case ValueType::kUint8:
      return unsigned_fits<uint8_t>(v);
    case ValueType::kUint16:
      return unsigned_fits<uint16_t>(v);
    case ValueType::kUint32:
      return unsigned_fits<uint32_t>(v);
    case ValueType::kUint64:
      return unsigned_fits<uint64_t>(v);
    case ValueType::kInt8:
      return signed_fits<int8_t>(v);
    case ValueType::kInt16:
      return signed_fits<int16_t>(v);
    case ValueType::kInt32:
      return signed_fits<int32_t>(v);
    case ValueType::kInt64:
      return signed_fits<int64_t>(v);
    case ValueType::kFloat32: {
      // Written as a float: the value must narrow without overflowing.
      const auto* d = std::get_if<double>(&v.v);
      return d != nullptr &&
             (!std::isfinite(*d) || std::fabs(*d) <= std::numeric_limits<float>::max());
    }
    case ValueType::kFloat64:
      return std::holds_alternative<double>(v.v);
    case ValueType::kBool:
      return std::holds_alternative<bool>(v.v);
    case ValueType::kString:
      return std::holds_alternative<std::string>(v.v);
    case ValueType::kArray: {
      const auto* a = std::get_if<Array>(&v.v);
      if (a == nullptr || !value_type_from_id(static_cast<uint32_t>(a->elem_type))) return false;
      for (const auto& item : a->items)
        if (item.type != a->elem_type) return false;
      return true;
    }
  }
  return false;
}

}  // namespace detail
}  // namespace sustain::gguf

// Typed accessors on File.
namespace sustain::gguf {
namespace {

Status wrong_type(const File& f, std::string_view key, const Value& v, const char* expected) {
  return error(Code::kBadFile, "{}: `{}` is {}, expected {}", f.path(), key, detail::describe(v),
               expected);
}

bool is_unsigned(ValueType t) {
  return t == ValueType::kUint8 || t == ValueType::kUint16 || t == ValueType::kUint32 ||
         t == ValueType::kUint64;
}
bool is_signed(ValueType t) {
  return t == ValueType::kInt8 || t == ValueType::kInt16 || t == ValueType::kInt32 ||
         t == ValueType::kInt64;
}
bool is_float(ValueType t) {
  return t == ValueType::kFloat32 || t == ValueType::kFloat64;
}

// The conversions below are shared by scalar and array accessors; `where`
// names the key (and element) for messages.
Expected<uint64_t> as_uint(const File& f, const std::string& where, const Value& v) {
  if (is_unsigned(v.type)) return std::get<uint64_t>(v.v);
  if (is_signed(v.type)) {
    int64_t x = std::get<int64_t>(v.v);
    if (x < 0)
      return error(Code::kBadFile, "{}: `{}` is {}, expected an unsigned integer", f.path(), where,
                   x);
    return static_cast<uint64_t>(x);
  }
  return wrong_type(f, where, v, "an unsigned integer");
}

Expected<int64_t> as_int(const File& f, const std::string& where, const Value& v) {
  if (is_signed(v.type)) return std::get<int64_t>(v.v);
  if (is_unsigned(v.type)) {
    uint64_t x = std::get<uint64_t>(v.v);
    if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return error(Code::kBadFile, "{}: `{}` is {}, out of the int64 range", f.path(), where, x);
    return static_cast<int64_t>(x);
  }
  return wrong_type(f, where, v, "an integer");
}

Expected<double> as_float(const File& f, const std::string& where, const Value& v) {
  if (is_float(v.type)) return std::get<double>(v.v);
  if (is_unsigned(v.type)) return static_cast<double>(std::get<uint64_t>(v.v));
  if (is_signed(v.type)) return static_cast<double>(std::get<int64_t>(v.v));
  return wrong_type(f, where, v, "a number");
}

Expected<const Value*> lookup(const File& f, std::string_view key) {
  const Value* v = f.find(key);
  if (v == nullptr) return error(Code::kNotFound, "{}: key `{}` not found", f.path(), key);
  return v;
}

Expected<const Array*> lookup_array(const File& f, std::string_view key, const char* expected) {
  SUSTAIN_ASSIGN_OR_RETURN(const Value* v, lookup(f, key));
  const auto* a = v->type == ValueType::kArray ? std::get_if<Array>(&v->v) : nullptr;
  if (a == nullptr) return wrong_type(f, key, *v, expected);
  return a;
}

}  // namespace

Expected<uint64_t> File::get_uint(std::string_view key) const {
  SUSTAIN_ASSIGN_OR_RETURN(const Value* v, lookup(*this, key));
  return as_uint(*this, std::string(key), *v);
}

Expected<int64_t> File::get_int(std::string_view key) const {
  SUSTAIN_ASSIGN_OR_RETURN(const Value* v, lookup(*this, key));
  return as_int(*this, std::string(key), *v);
}

Expected<double> File::get_float(std::string_view key) const {
  SUSTAIN_ASSIGN_OR_RETURN(const Value* v, lookup(*this, key));
  return as_float(*this, std::string(key), *v);
}

Expected<bool> File::get_bool(std::string_view key) const {
  SUSTAIN_ASSIGN_OR_RETURN(const Value* v, lookup(*this, key));
  if (v->type != ValueType::kBool) return wrong_type(*this, key, *v, "a bool");
  return std::get<bool>(v->v);
}

Expected<std::string> File::get_string(std::string_view key) const {
  SUSTAIN_ASSIGN_OR_RETURN(const Value* v, lookup(*this, key));
  if (v->type != ValueType::kString) return wrong_type(*this, key, *v, "a string");
  return std::get<std::string>(v->v);
}

Expected<std::vector<std::string>> File::get_string_array(std::string_view key) const {
  constexpr const char* kExpected = "an array of strings";
  SUSTAIN_ASSIGN_OR_RETURN(const Array* a, lookup_array(*this, key, kExpected));
  if (a->elem_type != ValueType::kString) return wrong_type(*this, key, *find(key), kExpected);
  std::vector<std::string> out;
  out.reserve(a->items.size());
  for (const auto& item : a->items) out.push_back(std::get<std::string>(item.v));
  return out;
}

Expected<std::vector<float>> File::get_float_array(std::string_view key) const {
  constexpr const char* kExpected = "an array of numbers";
  SUSTAIN_ASSIGN_OR_RETURN(const Array* a, lookup_array(*this, key, kExpected));
  ValueType et = a->elem_type;
  if (!is_float(et) && !is_signed(et) && !is_unsigned(et))
    return wrong_type(*this, key, *find(key), kExpected);
  std::vector<float> out;
  out.reserve(a->items.size());
  for (size_t i = 0; i < a->items.size(); ++i) {
    SUSTAIN_ASSIGN_OR_RETURN(double x, as_float(*this, fmt::format("{}[{}]", key, i), a->items[i]));
    // A float64 beyond float's range cannot be narrowed (undefined behaviour).
    if (std::isfinite(x) && std::fabs(x) > std::numeric_limits<float>::max())
      return error(Code::kBadFile, "{}: `{}[{}]` is {}, out of the float32 range", path(), key, i,
                   x);
    out.push_back(static_cast<float>(x));
  }
  return out;
}

Expected<std::vector<int64_t>> File::get_int_array(std::string_view key) const {
  constexpr const char* kExpected = "an array of integers";
  SUSTAIN_ASSIGN_OR_RETURN(const Array* a, lookup_array(*this, key, kExpected));
  if (!is_signed(a->elem_type) && !is_unsigned(a->elem_type))
    return wrong_type(*this, key, *find(key), kExpected);
  std::vector<int64_t> out;
  out.reserve(a->items.size());
  for (size_t i = 0; i < a->items.size(); ++i) {
    SUSTAIN_ASSIGN_OR_RETURN(int64_t x, as_int(*this, fmt::format("{}[{}]", key, i), a->items[i]));
    out.push_back(x);
  }
  return out;
}

Expected<uint64_t> File::get_uint_or(std::string_view key, uint64_t dflt) const {
  return has(key) ? get_uint(key) : Expected<uint64_t>(dflt);
}

Expected<double> File::get_float_or(std::string_view key, double dflt) const {
  return has(key) ? get_float(key) : Expected<double>(dflt);
}

Expected<bool> File::get_bool_or(std::string_view key, bool dflt) const {
  return has(key) ? get_bool(key) : Expected<bool>(dflt);
}

Expected<std::string> File::get_string_or(std::string_view key, std::string dflt) const {
  return has(key) ? get_string(key) : Expected<std::string>(std::move(dflt));
}

}  // namespace sustain::gguf
