// GGUF v2/v3 reader and writer.
//
// The reader treats every byte as untrusted: each count, length, product, sum
// and offset is checked for overflow and against the file size before use, and
// a malformed file yields a Status naming the problem — never a crash, abort,
// hang or huge allocation. Tensor data is not copied: TensorInfo::data points
// into the memory-mapped file.
//
// Shapes: GGUF stores dims fastest-first (`ne[0]` is the row length). sustain
// uses PyTorch order everywhere (W[out, in], row-major; see
// src/tensor/README.md). The conversion happens here and nowhere else:
// TensorInfo::shape is reversed `ne`, and GgufWriter::add_tensor takes
// PyTorch order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "tensor/qtype.h"

namespace sustain::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr uint32_t kMaxDims = 4;

enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* value_type_name(ValueType t);  // "uint32", "string", "array", ...

struct Value;
struct Array {
  ValueType elem_type = ValueType::kUint8;
  std::vector<Value> items;
};

// A metadata value. Scalars are stored widened (all unsigned types as
// uint64_t, signed as int64_t, floats as double); `type` keeps the exact type
// so a writer round trip preserves it.
struct Value {
  ValueType type = ValueType::kUint8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> v;

  static Value u8(uint8_t x) { return {ValueType::kUint8, uint64_t{x}}; }
  static Value u16(uint16_t x) { return {ValueType::kUint16, uint64_t{x}}; }
  static Value u32(uint32_t x) { return {ValueType::kUint32, uint64_t{x}}; }
  static Value u64(uint64_t x) { return {ValueType::kUint64, x}; }
  static Value i8(int8_t x) { return {ValueType::kInt8, int64_t{x}}; }
  static Value i16(int16_t x) { return {ValueType::kInt16, int64_t{x}}; }
  static Value i32(int32_t x) { return {ValueType::kInt32, int64_t{x}}; }
  static Value i64(int64_t x) { return {ValueType::kInt64, x}; }
  static Value f32(float x) { return {ValueType::kFloat32, double{x}}; }
  static Value f64(double x) { return {ValueType::kFloat64, x}; }
  static Value boolean(bool x) { return {ValueType::kBool, x}; }
  static Value str(std::string x) { return {ValueType::kString, std::move(x)}; }
  static Value array(ValueType elem, std::vector<Value> items) {
    return {ValueType::kArray, Array{elem, std::move(items)}};
  }
  static Value str_array(const std::vector<std::string>& xs);
  static Value f32_array(const std::vector<float>& xs);
  static Value i32_array(const std::vector<int32_t>& xs);
};

struct TensorInfo {
  std::string name;
  QType type = QType::F32;
  std::vector<int64_t> shape;  // PyTorch order (reversed GGUF ne)
  std::vector<uint64_t> ne;    // GGUF order, as stored
  uint64_t offset = 0;         // relative to the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping; n_bytes long
};

struct ReadOptions {
  // Caps that keep a hostile file from making us allocate without bound. Each
  // is far above any real model.
  uint64_t max_string_bytes = 64ull << 20;     // one metadata string
  uint64_t max_array_elems = 64ull << 20;      // one metadata array
  uint64_t max_tensors = 1ull << 20;
  uint64_t max_kv = 1ull << 20;
  uint32_t max_array_depth = 8;                // nested arrays
};

class File {
 public:
  static Expected<File> open(const std::string& path, const ReadOptions& opt = {});
  static Expected<File> parse(std::shared_ptr<MappedFile> mapping, const ReadOptions& opt = {});

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section
  uint64_t file_size() const { return mapping_->size(); }
  const std::string& path() const { return mapping_->path(); }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed accessors. Errors name the key and both types, e.g.
  // "`llama.block_count` is a string, expected an unsigned integer".
  Expected<uint64_t> get_uint(std::string_view key) const;  // any integer type, value >= 0
  Expected<int64_t> get_int(std::string_view key) const;    // any integer type fitting int64
  Expected<double> get_float(std::string_view key) const;   // float32/float64 (or any integer)
  Expected<bool> get_bool(std::string_view key) const;
  Expected<std::string> get_string(std::string_view key) const;
  Expected<std::vector<std::string>> get_string_array(std::string_view key) const;
  Expected<std::vector<float>> get_float_array(std::string_view key) const;
  Expected<std::vector<int64_t>> get_int_array(std::string_view key) const;
  // With a default where the key is absent (a present key of the wrong type is still an error).
  Expected<uint64_t> get_uint_or(std::string_view key, uint64_t dflt) const;
  Expected<double> get_float_or(std::string_view key, double dflt) const;
  Expected<bool> get_bool_or(std::string_view key, bool dflt) const;
  Expected<std::string> get_string_or(std::string_view key, std::string dflt) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

  const std::shared_ptr<MappedFile>& mapping() const { return mapping_; }

 private:
  std::shared_ptr<MappedFile> mapping_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// Writes GGUF v3. Two ways to use it:
//  - whole: set metadata, add_tensor(..., data) for each tensor, write(path);
//  - streaming (models larger than memory): add_tensor(..., nullptr) for every
//    tensor, begin(path), then write_tensor_data() for each tensor in the order
//    they were added, then finish().
class Writer {
 public:
  Writer();
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Sets (or replaces, keeping its position) a metadata key.
  void set(const std::string& key, Value v);
  void set_u32(const std::string& key, uint32_t x) { set(key, Value::u32(x)); }
  void set_f32(const std::string& key, float x) { set(key, Value::f32(x)); }
  void set_bool(const std::string& key, bool x) { set(key, Value::boolean(x)); }
  void set_str(const std::string& key, std::string x) { set(key, Value::str(std::move(x))); }
  void remove(const std::string& key);
  // Alignment of tensor data (a power of two; written as general.alignment when not 32).
  Status set_alignment(uint32_t alignment);

  // shape in PyTorch order; shape.back() must be a multiple of the type's block size.
  // `data`, if given, must stay valid until write() and hold the tensor's bytes.
  Status add_tensor(const std::string& name, QType type, const std::vector<int64_t>& shape,
                    const void* data = nullptr);

  Status write(const std::string& path);

  Status begin(const std::string& path);
  Status write_tensor_data(const void* bytes, uint64_t n_bytes);
  Status finish();

  size_t tensor_count() const;
  uint64_t tensor_bytes(size_t i) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sustain::gguf
