// GGUF v3 writer. The header, metadata and tensor infos are serialized into
// memory first (they are small next to the weights), then tensor data is
// streamed after them. Output goes to `path.tmp.<pid>.<n>` and is renamed
// into place by finish(), so a failed or abandoned write never leaves a
// partial file under the final name, and two writers of the same path (two
// processes making the same test model) never write into one file: the last
// rename wins with a whole file.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "base/checked_math.h"
#include "gguf/detail.h"
#include "gguf/gguf.h"

namespace sustain::gguf {
namespace {

constexpr uint32_t kMaxAlignment = 1u << 16;  // same cap as the reader
constexpr size_t kFileBufferBytes = 1u << 20;
constexpr uint32_t kMaxValueDepth = 8;  // ReadOptions::max_array_depth's default

class Buffer {
 public:
  template <typename T>
  void put(T x) {
    const auto* p = reinterpret_cast<const uint8_t*>(&x);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

Status put_value(Buffer& b, const Value& v, const std::string& what, uint32_t depth) {
  if (!detail::value_consistent(v))
    return error(Code::kInvalidArgument,
                 "GGUF writer: {} holds a value that does not fit its declared type {}", what,
                 value_type_name(v.type));
  switch (v.type) {
    case ValueType::kUint8:
      b.put(static_cast<uint8_t>(std::get<uint64_t>(v.v)));
      break;
    case ValueType::kUint16:
      b.put(static_cast<uint16_t>(std::get<uint64_t>(v.v)));
      break;
    case ValueType::kUint32:
      b.put(static_cast<uint32_t>(std::get<uint64_t>(v.v)));
      break;
    case ValueType::kUint64:
      b.put(std::get<uint64_t>(v.v));
      break;
    case ValueType::kInt8:
      b.put(static_cast<int8_t>(std::get<int64_t>(v.v)));
      break;
    case ValueType::kInt16:
      b.put(static_cast<int16_t>(std::get<int64_t>(v.v)));
      break;
    case ValueType::kInt32:
      b.put(static_cast<int32_t>(std::get<int64_t>(v.v)));
      break;
    case ValueType::kInt64:
      b.put(std::get<int64_t>(v.v));
      break;
    case ValueType::kFloat32:
      b.put(static_cast<float>(std::get<double>(v.v)));
      break;
    case ValueType::kFloat64:
      b.put(std::get<double>(v.v));
      break;
    case ValueType::kBool:
      b.put<uint8_t>(std::get<bool>(v.v) ? 1 : 0);
      break;
    case ValueType::kString:
      b.put_string(std::get<std::string>(v.v));
      break;
    case ValueType::kArray: {
      const Array& a = std::get<Array>(v.v);
      if (a.elem_type == ValueType::kArray && depth + 1 >= kMaxValueDepth)
        return error(Code::kInvalidArgument,
                     "GGUF writer: {} nests arrays deeper than {} levels (readers reject it)", what,
                     kMaxValueDepth);
      b.put(static_cast<uint32_t>(a.elem_type));
      b.put<uint64_t>(a.items.size());
      for (size_t i = 0; i < a.items.size(); ++i)
        SUSTAIN_TRY(put_value(b, a.items[i], fmt::format("{}[{}]", what, i), depth + 1));
      break;
    }
  }
  return Status::ok();
}

struct PendingTensor {
  std::string name;
  QType type;
  std::vector<int64_t> shape;  // PyTorch order
  uint64_t n_bytes;
  const void* data;
};

}  // namespace

struct Writer::Impl {
  std::vector<std::pair<std::string, Value>> kv;
  uint32_t alignment = kDefaultAlignment;
  std::vector<PendingTensor> tensors;
  std::unordered_set<std::string> names;

  // Streaming state, between begin() and finish().
  std::FILE* file = nullptr;
  std::string path, tmp_path;
  size_t next_tensor = 0;
  uint64_t effective_alignment = kDefaultAlignment;

  ~Impl() { abandon(); }

  // Closes and deletes a partial output.
  void abandon() {
    if (file != nullptr) {
      std::fclose(file);
      file = nullptr;
      std::remove(tmp_path.c_str());
    }
  }

  Status io_error(const char* op) {
    int e = errno;
    abandon();
    return error(Code::kIo, "cannot {} '{}': {}", op, tmp_path, std::strerror(e));
  }

  Status write_bytes(const void* p, uint64_t n) {
    if (n > 0 && std::fwrite(p, 1, n, file) != n) return io_error("write");
    return Status::ok();
  }

  Status write_zeros(uint64_t n) {
    static const uint8_t kZeros[kMaxAlignment] = {};
    while (n > 0) {
      uint64_t k = std::min<uint64_t>(n, sizeof(kZeros));
      SUSTAIN_TRY(write_bytes(kZeros, k));
      n -= k;
    }
    return Status::ok();
  }

  // The alignment the file will use: general.alignment when the caller set it
  // (as a valid uint32), else the one from set_alignment().
  Expected<uint64_t> resolve_alignment() const {
    for (const auto& [k, v] : kv) {
      if (k != "general.alignment") continue;
      if (v.type != ValueType::kUint32 || !detail::value_consistent(v))
        return error(Code::kInvalidArgument,
                     "GGUF writer: `general.alignment` is {}, expected a uint32",
                     detail::describe(v));
      uint64_t a = std::get<uint64_t>(v.v);
      if (!is_pow2(a) || a > kMaxAlignment)
        return error(Code::kInvalidArgument,
                     "GGUF writer: `general.alignment` is {}, expected a power of two up to {}", a,
                     kMaxAlignment);
      return a;
    }
    return uint64_t{alignment};
  }
};

Writer::Writer() : impl_(std::make_unique<Impl>()) {}
Writer::~Writer() = default;

void Writer::set(const std::string& key, Value v) {
  for (auto& [k, old] : impl_->kv) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  impl_->kv.emplace_back(key, std::move(v));
}

void Writer::remove(const std::string& key) {
  auto& kv = impl_->kv;
  for (auto it = kv.begin(); it != kv.end(); ++it) {
    if (it->first == key) {
      kv.erase(it);
      return;
    }
  }
}

Status Writer::set_alignment(uint32_t alignment) {
  if (!is_pow2(alignment) || alignment > kMaxAlignment)
    return error(Code::kInvalidArgument, "GGUF alignment {} is not a power of two in 1..{}",
                 alignment, kMaxAlignment);
  impl_->alignment = alignment;
  if (alignment == kDefaultAlignment)
    remove("general.alignment");
  else
    set_u32("general.alignment", alignment);
  return Status::ok();
}

Status Writer::add_tensor(const std::string& name, QType type, const std::vector<int64_t>& shape,
                          const void* data) {
  if (impl_->file != nullptr)
    return error(Code::kInvalidArgument, "tensor `{}`: add_tensor after begin()", name);
  if (name.empty()) return error(Code::kInvalidArgument, "GGUF writer: empty tensor name");
  if (impl_->names.count(name))
    return error(Code::kInvalidArgument, "tensor `{}` was already added", name);
  const QTypeTraits* tr = find_qtype(static_cast<uint32_t>(type));
  if (tr == nullptr || !tr->in_gguf)
    return error(Code::kInvalidArgument, "tensor `{}`: type {} cannot be stored in GGUF", name,
                 tr ? tr->name : std::string_view("(unknown)"));
  if (shape.empty() || shape.size() > kMaxDims)
    return error(Code::kInvalidArgument, "tensor `{}`: {} dims, expected 1..{}", name, shape.size(),
                 kMaxDims);
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0)
      return error(Code::kInvalidArgument, "tensor `{}`: dimension {} is not positive", name, d);
    auto p = checked_mul(n, static_cast<uint64_t>(d));
    if (!p || *p > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return error(Code::kInvalidArgument, "tensor `{}`: element count overflows", name);
    n = *p;
  }
  if (static_cast<uint64_t>(shape.back()) % tr->block_elems != 0)
    return error(Code::kInvalidArgument,
                 "tensor `{}`: last dimension {} is not a multiple of the {} block size {}", name,
                 shape.back(), tr->name, tr->block_elems);
  auto nb = checked_mul(n / tr->block_elems, tr->block_bytes);
  if (!nb) return error(Code::kInvalidArgument, "tensor `{}`: byte size overflows", name);
  impl_->names.insert(name);
  impl_->tensors.push_back({name, type, shape, *nb, data});
  return Status::ok();
}

size_t Writer::tensor_count() const {
  return impl_->tensors.size();
}
uint64_t Writer::tensor_bytes(size_t i) const {
  return impl_->tensors.at(i).n_bytes;
}

Status Writer::write(const std::string& path) {
  for (const auto& t : impl_->tensors)
    if (t.data == nullptr)
      return error(Code::kInvalidArgument,
                   "tensor `{}` has no data; use begin()/write_tensor_data()/finish() to stream it",
                   t.name);
  SUSTAIN_TRY(begin(path));
  for (const auto& t : impl_->tensors) SUSTAIN_TRY(write_tensor_data(t.data, t.n_bytes));
  return finish();
}

Status Writer::begin(const std::string& path) {
  Impl& m = *impl_;
  if (m.file != nullptr)
    return error(Code::kInvalidArgument, "GGUF writer: begin('{}') while '{}' is still open", path,
                 m.path);
  SUSTAIN_ASSIGN_OR_RETURN(uint64_t alignment, m.resolve_alignment());

  Buffer b;
  b.put<uint32_t>(kMagic);
  b.put<uint32_t>(3);
  b.put<uint64_t>(m.tensors.size());
  b.put<uint64_t>(m.kv.size());
  for (const auto& [key, value] : m.kv) {
    if (key.empty()) return error(Code::kInvalidArgument, "GGUF writer: empty metadata key");
    b.put_string(key);
    b.put<uint32_t>(static_cast<uint32_t>(value.type));
    SUSTAIN_TRY(put_value(b, value, fmt::format("key `{}`", key), 0));
  }
  uint64_t offset = 0;
  for (const auto& t : m.tensors) {
    b.put_string(t.name);
    b.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it)
      b.put<uint64_t>(static_cast<uint64_t>(*it));
    b.put<uint32_t>(static_cast<uint32_t>(t.type));
    b.put<uint64_t>(offset);
    auto padded = checked_align_up(t.n_bytes, alignment);
    auto next = padded ? checked_add(offset, *padded) : std::nullopt;
    if (!next)
      return error(Code::kInvalidArgument, "GGUF writer: data section size overflows at `{}`",
                   t.name);
    offset = *next;
  }
  b.pad_to(alignment);

  m.path = path;
  static std::atomic<uint64_t> n_writes{0};
  m.tmp_path = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(n_writes++);
  m.file = std::fopen(m.tmp_path.c_str(), "wb");
  if (m.file == nullptr)
    return error(Code::kIo, "cannot create '{}': {}", m.tmp_path, std::strerror(errno));
  std::setvbuf(m.file, nullptr, _IOFBF, kFileBufferBytes);
  m.next_tensor = 0;
  m.effective_alignment = alignment;
  return m.write_bytes(b.bytes().data(), b.bytes().size());
}

Status Writer::write_tensor_data(const void* bytes, uint64_t n_bytes) {
  Impl& m = *impl_;
  if (m.file == nullptr)
    return error(Code::kInvalidArgument, "GGUF writer: write_tensor_data() before begin()");
  if (m.next_tensor >= m.tensors.size())
    return error(Code::kInvalidArgument,
                 "GGUF writer: write_tensor_data() called more often than the {} tensors added",
                 m.tensors.size());
  const PendingTensor& t = m.tensors[m.next_tensor];
  if (n_bytes != t.n_bytes)
    return error(Code::kInvalidArgument, "tensor `{}`: got {} bytes of data, expected {}", t.name,
                 n_bytes, t.n_bytes);
  if (bytes == nullptr && n_bytes > 0)
    return error(Code::kInvalidArgument, "tensor `{}`: data is null", t.name);
  SUSTAIN_TRY(m.write_bytes(bytes, n_bytes));
  uint64_t rem = n_bytes % m.effective_alignment;
  if (rem != 0) SUSTAIN_TRY(m.write_zeros(m.effective_alignment - rem));
  ++m.next_tensor;
  return Status::ok();
}

Status Writer::finish() {
  Impl& m = *impl_;
  if (m.file == nullptr)
    return error(Code::kInvalidArgument, "GGUF writer: finish() before begin()");
  if (m.next_tensor != m.tensors.size()) {
    size_t written = m.next_tensor;
    std::string missing = m.tensors[written].name;
    m.abandon();
    return error(Code::kInvalidArgument,
                 "GGUF writer: only {} of {} tensors were written (next: `{}`); '{}' not created",
                 written, m.tensors.size(), missing, m.path);
  }
  if (std::fflush(m.file) != 0 || std::ferror(m.file)) return m.io_error("write");
  std::FILE* f = m.file;
  m.file = nullptr;
  if (std::fclose(f) != 0) {
    int e = errno;
    std::remove(m.tmp_path.c_str());
    return error(Code::kIo, "cannot write '{}': {}", m.tmp_path, std::strerror(e));
  }
  if (std::rename(m.tmp_path.c_str(), m.path.c_str()) != 0) {
    int e = errno;
    std::remove(m.tmp_path.c_str());
    return error(Code::kIo, "cannot rename '{}' to '{}': {}", m.tmp_path, m.path, std::strerror(e));
  }
  return Status::ok();
}

}  // namespace sustain::gguf
