// GGUF v2/v3 reader. Every number read from the file is untrusted: counts and
// lengths are bounded by the bytes that remain before anything is allocated,
// and every product, sum and offset goes through checked_math.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>

#include <fmt/ranges.h>

#include "base/checked_math.h"
#include "gguf/detail.h"
#include "gguf/gguf.h"

namespace sustain::gguf {
namespace {

constexpr uint64_t kMaxAlignment = 1u << 16;  // real files use 32 or 64
// Fewest bytes a key/value record can take: u64 key length, a 1-byte key, u32
// type, and a 1-byte value.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
// Fewest bytes a tensor-info record can take: u64 name length, a 1-byte name,
// u32 n_dims, one u64 dim, u32 type, u64 offset.
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

// Sequential little-endian reads over the mapping with bounds checks.
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size, const std::string& path)
      : data_(data), size_(size), path_(path) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  const uint8_t* here() const { return data_ + pos_; }
  const std::string& path() const { return path_; }

  Status need(uint64_t n, const std::string& what) const {
    if (n > remaining())
      return error(Code::kBadFile, "{}: truncated: {} needs {} bytes at offset {}, only {} left",
                   path_, what, n, pos_, remaining());
    return Status::ok();
  }

  template <typename T>
  Status read(T& out, const std::string& what) {
    SUSTAIN_TRY(need(sizeof(T), what));
    // GGUF is little-endian; the host is too (checked in File::parse).
    std::memcpy(&out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok();
  }

  Status read_string(std::string& out, uint64_t max_bytes, const std::string& what) {
    uint64_t len = 0;
    SUSTAIN_TRY(read(len, what + " length"));
    if (len > max_bytes)
      return error(Code::kBadFile, "{}: {} is {} bytes long, over the limit of {}", path_, what,
                   len, max_bytes);
    if (len > remaining())
      return error(Code::kBadFile,
                   "{}: {} is {} bytes long but only {} bytes remain in the file (offset {})",
                   path_, what, len, remaining(), pos_);
    out.assign(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return Status::ok();
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
};

// Names the value being read ("key `k`[3][0]") for error messages. Built
// only when an error is reported, so large arrays pay nothing for it.
struct Label {
  const std::string* key = nullptr;  // set on the root
  const Label* parent = nullptr;     // set on array elements
  uint64_t index = 0;

  std::string str() const {
    if (parent == nullptr) return *key;
    return fmt::format("{}[{}]", parent->str(), index);
  }
};

Status bad(const Cursor& c, const std::string& msg) {
  return Status(Code::kBadFile, c.path() + ": " + msg);
}

Expected<Value> read_value(Cursor& c, ValueType type, uint32_t depth, const ReadOptions& opt,
                           const Label& what);

template <typename T, typename Wide>
Expected<Value> read_scalar(Cursor& c, ValueType type, const Label& what) {
  T x{};
  if (c.remaining() < sizeof(T)) return c.need(sizeof(T), what.str());
  SUSTAIN_TRY(c.read(x, ""));
  return Value{type, static_cast<Wide>(x)};
}

Expected<Value> read_array(Cursor& c, uint32_t depth, const ReadOptions& opt, const Label& label) {
  uint32_t elem_id = 0;
  const std::string what = label.str();  // once per array, not per element
  SUSTAIN_TRY(c.read(elem_id, what + " element type"));
  auto elem = detail::value_type_from_id(elem_id);
  if (!elem) return bad(c, fmt::format("{} has invalid element type id {}", what, elem_id));
  if (*elem == ValueType::kArray && depth + 1 >= opt.max_array_depth)
    return bad(c, fmt::format("{} nests arrays deeper than {} levels", what, opt.max_array_depth));
  uint64_t count = 0;
  SUSTAIN_TRY(c.read(count, what + " element count"));
  if (count > opt.max_array_elems)
    return bad(c, fmt::format("{} has {} elements, over the limit of {}", what, count,
                              opt.max_array_elems));
  // Bound the count by the bytes left before reserving anything.
  auto min_bytes = checked_mul(count, detail::min_encoded_size(*elem));
  if (!min_bytes || *min_bytes > c.remaining())
    return bad(c, fmt::format("{} has {} elements of type {}, more than the {} bytes left in "
                              "the file can hold",
                              what, count, value_type_name(*elem), c.remaining()));
  Array arr;
  arr.elem_type = *elem;
  arr.items.reserve(static_cast<size_t>(count));
  Label item{nullptr, &label, 0};
  for (uint64_t i = 0; i < count; ++i) {
    item.index = i;
    SUSTAIN_ASSIGN_OR_RETURN(Value v, read_value(c, *elem, depth + 1, opt, item));
    arr.items.push_back(std::move(v));
  }
  return Value{ValueType::kArray, std::move(arr)};
}

Expected<Value> read_value(Cursor& c, ValueType type, uint32_t depth, const ReadOptions& opt,
                           const Label& what) {
  switch (type) {
    case ValueType::kUint8:
      return read_scalar<uint8_t, uint64_t>(c, type, what);
    case ValueType::kUint16:
      return read_scalar<uint16_t, uint64_t>(c, type, what);
    case ValueType::kUint32:
      return read_scalar<uint32_t, uint64_t>(c, type, what);
    case ValueType::kUint64:
      return read_scalar<uint64_t, uint64_t>(c, type, what);
    case ValueType::kInt8:
      return read_scalar<int8_t, int64_t>(c, type, what);
    case ValueType::kInt16:
      return read_scalar<int16_t, int64_t>(c, type, what);
    case ValueType::kInt32:
      return read_scalar<int32_t, int64_t>(c, type, what);
    case ValueType::kInt64:
      return read_scalar<int64_t, int64_t>(c, type, what);
    case ValueType::kFloat32:
      return read_scalar<float, double>(c, type, what);
    case ValueType::kFloat64:
      return read_scalar<double, double>(c, type, what);
    case ValueType::kBool: {
      uint8_t b = 0;
      if (c.remaining() < 1) return c.need(1, what.str());
      SUSTAIN_TRY(c.read(b, ""));
      if (b > 1)
        return bad(c, fmt::format("{} is a bool with invalid byte {} (not 0 or 1)", what.str(), b));
      return Value::boolean(b != 0);
    }
    case ValueType::kString: {
      std::string s;
      uint64_t len = 0;
      if (c.remaining() >= 8) std::memcpy(&len, c.here(), 8);
      // The common case (a short, in-bounds string) skips building the label.
      bool fits = c.remaining() >= 8 && len <= opt.max_string_bytes && len <= c.remaining() - 8;
      SUSTAIN_TRY(c.read_string(s, opt.max_string_bytes, fits ? std::string() : what.str()));
      return Value::str(std::move(s));
    }
    case ValueType::kArray:
      return read_array(c, depth, opt, what);
  }
  return bad(c, fmt::format("{} has invalid type id {}", what.str(), static_cast<uint32_t>(type)));
}

}  // namespace

Expected<File> File::open(const std::string& path, const ReadOptions& opt) {
  SUSTAIN_ASSIGN_OR_RETURN(auto mapping, MappedFile::open(path));
  return parse(std::move(mapping), opt);
}

Expected<File> File::parse(std::shared_ptr<MappedFile> mapping, const ReadOptions& opt) {
  if (!mapping) return error(Code::kInvalidArgument, "File::parse: no mapping");
  static_assert(std::endian::native == std::endian::little,
                "the GGUF reader assumes a little-endian host");
  File f;
  f.mapping_ = std::move(mapping);
  const std::string& path = f.mapping_->path();
  Cursor c(f.mapping_->data(), f.mapping_->size(), path);

  // Header.
  if (c.remaining() == 0) return error(Code::kBadFile, "{}: empty file (not a GGUF file)", path);
  uint32_t magic = 0;
  if (c.remaining() < 4)
    return error(Code::kBadFile, "{}: {} bytes is too short for a GGUF header", path,
                 c.remaining());
  SUSTAIN_TRY(c.read(magic, "magic"));
  if (magic == __builtin_bswap32(kMagic))
    return error(Code::kBadFile,
                 "{}: magic is byte-swapped (\"FUGG\"): a big-endian GGUF file, which is not "
                 "supported",
                 path);
  if (magic != kMagic)
    return error(Code::kBadFile, "{}: bad magic 0x{:08x} (expected \"GGUF\"): not a GGUF file",
                 path, magic);
  uint32_t version = 0;
  SUSTAIN_TRY(c.read(version, "version"));
  if (version != 2 && version != 3) {
    uint32_t swapped = __builtin_bswap32(version);
    if (swapped >= 1 && swapped <= 3)
      return error(Code::kBadFile,
                   "{}: version field reads 0x{:08x}: a big-endian (byte-swapped) GGUF v{} file, "
                   "which is not supported; only little-endian GGUF is",
                   path, version, swapped);
    if (version == 1)
      return error(Code::kBadFile,
                   "{}: unsupported version 1 (GGUF v1 is obsolete; only versions 2 and 3 are "
                   "supported)",
                   path);
    return error(Code::kBadFile, "{}: unsupported version {} (only versions 2 and 3 are supported)",
                 path, version);
  }
  f.version_ = version;
  uint64_t n_tensors = 0, n_kv = 0;
  SUSTAIN_TRY(c.read(n_tensors, "tensor count"));
  SUSTAIN_TRY(c.read(n_kv, "metadata count"));
  if (n_kv > opt.max_kv)
    return error(Code::kBadFile, "{}: metadata count {} is over the limit of {}", path, n_kv,
                 opt.max_kv);
  if (n_tensors > opt.max_tensors)
    return error(Code::kBadFile, "{}: tensor count {} is over the limit of {}", path, n_tensors,
                 opt.max_tensors);
  {
    auto kv_min = checked_mul(n_kv, kMinKvBytes);
    auto ti_min = checked_mul(n_tensors, kMinTensorInfoBytes);
    auto total = kv_min && ti_min ? checked_add(*kv_min, *ti_min) : std::nullopt;
    if (!total || *total > c.remaining())
      return error(Code::kBadFile,
                   "{}: header claims {} metadata entries and {} tensors, more than the {} bytes "
                   "left in the file can hold",
                   path, n_kv, n_tensors, c.remaining());
  }

  // Metadata.
  f.kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    SUSTAIN_TRY(c.read_string(key, opt.max_string_bytes, fmt::format("metadata key #{}", i)));
    if (key.empty()) return error(Code::kBadFile, "{}: metadata key #{} is empty", path, i);
    if (f.kv_index_.count(key))
      return error(Code::kBadFile, "{}: duplicate key `{}`", path, detail::printable(key));
    std::string what = fmt::format("key `{}`", detail::printable(key));
    uint32_t type_id = 0;
    SUSTAIN_TRY(c.read(type_id, what + " type"));
    auto type = detail::value_type_from_id(type_id);
    if (!type) return error(Code::kBadFile, "{}: {} has invalid type id {}", path, what, type_id);
    SUSTAIN_ASSIGN_OR_RETURN(Value v, read_value(c, *type, 0, opt, Label{&what}));
    f.kv_index_.emplace(key, f.kv_.size());
    f.kv_.emplace_back(std::move(key), std::move(v));
  }

  // Alignment must be known before tensor offsets can be checked.
  if (const Value* a = f.find("general.alignment")) {
    if (a->type != ValueType::kUint32)
      return error(Code::kBadFile, "{}: `general.alignment` is {}, expected a uint32", path,
                   detail::describe(*a));
    uint64_t al = std::get<uint64_t>(a->v);
    if (al == 0 || !is_pow2(al))
      return error(Code::kBadFile, "{}: `general.alignment` is {}, which is not a power of two",
                   path, al);
    if (al > kMaxAlignment)
      return error(Code::kBadFile, "{}: `general.alignment` is {}, over the limit of {}", path, al,
                   kMaxAlignment);
    f.alignment_ = al;
  }

  // Tensor infos.
  f.tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    SUSTAIN_TRY(c.read_string(t.name, opt.max_string_bytes, fmt::format("tensor #{} name", i)));
    if (t.name.empty()) return error(Code::kBadFile, "{}: tensor #{} has an empty name", path, i);
    if (f.tensor_index_.count(t.name))
      return error(Code::kBadFile, "{}: duplicate tensor name `{}`", path,
                   detail::printable(t.name));
    std::string what = fmt::format("tensor `{}`", detail::printable(t.name));
    uint32_t n_dims = 0;
    SUSTAIN_TRY(c.read(n_dims, what + " n_dims"));
    if (n_dims == 0 || n_dims > kMaxDims)
      return error(Code::kBadFile, "{}: {}: n_dims is {}, expected 1..{}", path, what, n_dims,
                   kMaxDims);
    t.ne.resize(n_dims);
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      SUSTAIN_TRY(c.read(t.ne[d], fmt::format("{} ne[{}]", what, d)));
      if (t.ne[d] == 0)
        return error(Code::kBadFile, "{}: {}: dimension ne[{}] is 0", path, what, d);
      if (t.ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return error(Code::kBadFile, "{}: {}: dimension ne[{}] = {} is out of range", path, what, d,
                     t.ne[d]);
      auto p = checked_mul(n, t.ne[d]);
      if (!p || *p > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return error(Code::kBadFile, "{}: {}: element count of shape {} overflows", path, what,
                     fmt::join(t.ne, " x "));
      n = *p;
    }
    uint32_t type_id = 0;
    SUSTAIN_TRY(c.read(type_id, what + " type"));
    const QTypeTraits* tr = find_qtype(type_id);
    if (tr == nullptr || !tr->in_gguf)
      return error(Code::kBadFile, "{}: {}: unknown tensor type id {}", path, what, type_id);
    t.type = tr->type;
    if (t.ne[0] % tr->block_elems != 0)
      return error(Code::kBadFile,
                   "{}: {}: row length ne[0] = {} is not a multiple of the {} block size {}", path,
                   what, t.ne[0], tr->name, tr->block_elems);
    t.n_elements = n;
    auto nb = checked_mul(n / tr->block_elems, tr->block_bytes);
    if (!nb) return error(Code::kBadFile, "{}: {}: byte size overflows", path, what);
    t.n_bytes = *nb;
    SUSTAIN_TRY(c.read(t.offset, what + " offset"));
    if (t.offset % f.alignment_ != 0)
      return error(Code::kBadFile, "{}: {}: offset {} is not a multiple of the alignment {}", path,
                   what, t.offset, f.alignment_);
    t.shape.assign(t.ne.rbegin(), t.ne.rend());
    f.tensor_index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }

  // The data section starts at the next aligned offset. A file without
  // tensors may end before that (writers need not pad an empty data section).
  auto data_offset = checked_align_up(c.pos(), f.alignment_);
  if (!data_offset) return error(Code::kBadFile, "{}: data section offset overflows", path);
  f.data_offset_ = *data_offset;
  if (n_tensors == 0) return f;
  const uint64_t file_size = f.mapping_->size();
  if (f.data_offset_ > file_size)
    return error(Code::kBadFile,
                 "{}: data section would start at offset {}, past the end of the file ({} bytes)",
                 path, f.data_offset_, file_size);
  const uint64_t data_size = file_size - f.data_offset_;
  for (auto& t : f.tensors_) {
    auto end = checked_add(t.offset, t.n_bytes);
    if (!end || *end > data_size)
      return error(Code::kBadFile,
                   "{}: tensor `{}`: offset {} + {} bytes exceeds data section ({} bytes)", path,
                   detail::printable(t.name), t.offset, t.n_bytes, data_size);
    t.data = f.mapping_->data() + f.data_offset_ + t.offset;
  }

  // No two tensors may share bytes: a writer that overlaps them is broken, and
  // an in-place edit of one would silently change the other.
  std::vector<size_t> order(f.tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return f.tensors_[a].offset < f.tensors_[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& prev = f.tensors_[order[k - 1]];
    const TensorInfo& cur = f.tensors_[order[k]];
    if (cur.offset < prev.offset + prev.n_bytes)  // both sums were bounded above
      return error(Code::kBadFile,
                   "{}: tensors `{}` (bytes {}..{}) and `{}` (bytes {}..{}) overlap in the data "
                   "section",
                   path, detail::printable(prev.name), prev.offset, prev.offset + prev.n_bytes,
                   detail::printable(cur.name), cur.offset, cur.offset + cur.n_bytes);
  }
  return f;
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace sustain::gguf
