// libFuzzer target for the GGUF reader: parse arbitrary bytes, then exercise
// every accessor on every key and read every tensor byte, so ASan/UBSan see
// any out-of-bounds pointer the reader hands out. Files that parse are also
// re-written with the Writer and re-read: whatever the reader accepts, the
// writer must be able to reproduce.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gguf/gguf.h"

using namespace sustain;
using namespace sustain::gguf;

namespace {

// Crashes (so libFuzzer records the input) when a property is violated.
void require(bool cond, const char* what, const std::string& detail = {}) {
  if (cond) return;
  std::fprintf(stderr, "fuzz_gguf: property violated: %s %s\n", what, detail.c_str());
  std::abort();
}

// An accessor may fail, but only with a lookup or type error.
template <typename T>
void touch(const Expected<T>& r) {
  if (!r.has_value())
    require(r.status().code() == Code::kBadFile || r.status().code() == Code::kNotFound,
            "accessor failed with an unexpected code", r.status().message());
}

uint64_t g_sink = 0;

void touch_value(const Value& v, uint32_t depth) {
  require(depth <= 16, "value nesting beyond the reader's bound");
  if (const auto* a = std::get_if<Array>(&v.v)) {
    for (const auto& item : a->items) {
      require(item.type == a->elem_type, "array item type differs from element type");
      touch_value(item, depth + 1);
    }
  } else if (const auto* s = std::get_if<std::string>(&v.v)) {
    for (char c : *s) g_sink += static_cast<uint8_t>(c);
  }
}

void round_trip(const File& f) {
  Writer w;
  for (const auto& [k, v] : f.metadata()) w.set(k, v);
  for (const auto& t : f.tensors()) {
    Status st = w.add_tensor(t.name, t.type, t.shape, t.data);
    require(st.is_ok(), "writer rejected a tensor the reader accepted", st.message());
  }
  static const std::string path =
      std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/fuzz_gguf." +
      std::to_string(getpid()) + ".gguf";
  Status st = w.write(path);
  require(st.is_ok(), "writer failed on a file the reader accepted", st.message());
  auto g = File::open(path);
  std::remove(path.c_str());
  require(g.has_value(), "re-reading the writer's output failed", g.status().message());
  require(g->metadata().size() == f.metadata().size(), "metadata count changed");
  require(g->tensors().size() == f.tensors().size(), "tensor count changed");
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& a = f.tensors()[i];
    const auto& b = g->tensors()[i];
    require(a.name == b.name && a.type == b.type && a.ne == b.ne && a.n_bytes == b.n_bytes,
            "tensor info changed", a.name);
    for (uint64_t j = 0; j < a.n_bytes; ++j) require(a.data[j] == b.data[j], "tensor data changed");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto mapping = MappedFile::from_memory(data, size, "fuzz.gguf");
  ReadOptions opt;
  // Tighter caps keep the fuzzer's memory use small; the checks they guard are
  // the same ones the defaults exercise.
  opt.max_array_elems = 1u << 16;
  opt.max_string_bytes = 1u << 16;
  auto f = File::parse(mapping, opt);
  if (!f.has_value()) {
    require(f.status().code() == Code::kBadFile, "parse failed with a code other than kBadFile",
            f.status().message());
    require(!f.status().message().empty(), "empty error message");
    return 0;
  }
  require(f->version() == 2 || f->version() == 3, "bad version accepted");
  require(f->alignment() != 0 && (f->alignment() & (f->alignment() - 1)) == 0,
          "alignment not a power of two");

  for (const auto& [key, v] : f->metadata()) {
    require(f->find(key) == &v, "find() does not return the key's value", key);
    touch_value(v, 0);
    touch(f->get_uint(key));
    touch(f->get_int(key));
    touch(f->get_float(key));
    touch(f->get_bool(key));
    touch(f->get_string(key));
    touch(f->get_string_array(key));
    touch(f->get_float_array(key));
    touch(f->get_int_array(key));
    touch(f->get_uint_or(key, 1));
    touch(f->get_float_or(key, 1.0));
    touch(f->get_bool_or(key, true));
    touch(f->get_string_or(key, "x"));
  }
  touch(f->get_uint("fuzz.absent.key"));

  const uint8_t* begin = f->mapping()->data();
  const uint8_t* end = begin + f->file_size();
  for (const auto& t : f->tensors()) {
    require(f->find_tensor(t.name) == &t, "find_tensor() mismatch", t.name);
    require(t.data >= begin && t.n_bytes <= static_cast<uint64_t>(end - t.data),
            "tensor data outside the file", t.name);
    require(t.shape.size() == t.ne.size() && !t.ne.empty() && t.ne.size() <= kMaxDims, "bad dims",
            t.name);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < t.n_bytes; ++i) sum += t.data[i];
    g_sink += sum;
  }
  round_trip(*f);
  return 0;
}
