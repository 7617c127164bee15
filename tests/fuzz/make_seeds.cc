// Writes the fuzz_gguf seed corpus: small valid GGUF files made with our own
// writer (so the corpus exists even where ../shared/ref is absent), covering
// every metadata type, nested arrays, several tensor types and alignment 64.
#include <cstdio>
#include <string>
#include <vector>

#include "gguf/gguf.h"

using namespace sustain;
using namespace sustain::gguf;

namespace {

std::vector<uint8_t> bytes_for(QType t, uint64_t n_elems) {
  std::vector<uint8_t> v(qtype_row_bytes(t, n_elems));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 31 + 7);
  return v;
}

bool write(Writer& w, const std::string& dir, const char* name) {
  Status st = w.write(dir + "/" + name);
  if (!st.is_ok()) std::fprintf(stderr, "make_seeds: %s\n", st.message().c_str());
  return st.is_ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  bool ok = true;
  {
    Writer w;  // metadata only, every type
    w.set("general.architecture", Value::str("llama"));
    w.set("u8", Value::u8(1));
    w.set("i8", Value::i8(-1));
    w.set("u16", Value::u16(2));
    w.set("i16", Value::i16(-2));
    w.set("u32", Value::u32(3));
    w.set("i32", Value::i32(-3));
    w.set("u64", Value::u64(4));
    w.set("i64", Value::i64(-4));
    w.set("f32", Value::f32(0.5f));
    w.set("f64", Value::f64(0.25));
    w.set("b", Value::boolean(true));
    w.set("tokens", Value::str_array({"<s>", "</s>", "a", "b"}));
    w.set("scores", Value::f32_array({0, -1, -2, -3}));
    w.set("types", Value::i32_array({3, 3, 1, 1}));
    w.set("flags", Value::array(ValueType::kBool, {Value::boolean(false), Value::boolean(true)}));
    w.set("nested", Value::array(ValueType::kArray,
                                 {Value::i32_array({1}), Value::array(ValueType::kArray, {})}));
    ok &= write(w, dir, "metadata.gguf");
  }
  {
    Writer w;  // tensors of several types
    w.set_str("general.architecture", "llama");
    w.set_u32("llama.block_count", 1);
    struct T {
      const char* name;
      QType type;
      std::vector<int64_t> shape;
    };
    std::vector<T> ts = {{"token_embd.weight", QType::F32, {4, 8}},
                         {"blk.0.attn_q.weight", QType::Q8_0, {2, 32}},
                         {"blk.0.attn_k.weight", QType::Q4_0, {1, 32}},
                         {"blk.0.ffn_up.weight", QType::Q4_K, {1, 256}},
                         {"blk.0.ffn_down.weight", QType::F16, {3, 2, 4}},
                         {"output_norm.weight", QType::BF16, {1, 1, 2, 2}}};
    std::vector<std::vector<uint8_t>> data;
    for (const auto& t : ts) {
      uint64_t n = 1;
      for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
      data.push_back(bytes_for(t.type, n));
      ok &= w.add_tensor(t.name, t.type, t.shape, data.back().data()).is_ok();
    }
    ok &= write(w, dir, "tensors.gguf");
    ok &= w.set_alignment(64).is_ok();
    ok &= write(w, dir, "tensors-align64.gguf");
  }
  {
    Writer w;  // smallest file with a tensor
    std::vector<uint8_t> d = bytes_for(QType::F32, 1);
    ok &= w.add_tensor("x", QType::F32, {1}, d.data()).is_ok();
    ok &= write(w, dir, "one-scalar.gguf");
  }
  return ok ? 0 : 1;
}
