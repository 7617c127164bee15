// A small random-weight Gemma 3 projector written with the project's GGUF
// writer, so that the loader's checks can be tested without reference data.
// `edit` may change metadata or tensors before the file is written.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/splitmix.h"
#include "gguf/gguf.h"
#include "test_util.h"

namespace sustain::test {

struct SynthMmproj {
  std::map<std::string, gguf::Value> kv;
  struct T {
    std::vector<int64_t> shape;
    std::vector<float> data;
  };
  std::map<std::string, T> tensors;
};

inline SynthMmproj tiny_mmproj_spec() {
  const int64_t S = 8, P = 2, D = 32, FF = 64, N = (S / P) * (S / P), TEXT = 24;
  SynthMmproj m;
  m.kv["general.architecture"] = gguf::Value::str("clip");
  m.kv["clip.has_vision_encoder"] = gguf::Value::boolean(true);
  m.kv["clip.projector_type"] = gguf::Value::str("gemma3");
  m.kv["clip.vision.image_size"] = gguf::Value::u32(S);
  m.kv["clip.vision.patch_size"] = gguf::Value::u32(P);
  m.kv["clip.vision.embedding_length"] = gguf::Value::u32(D);
  m.kv["clip.vision.feed_forward_length"] = gguf::Value::u32(FF);
  m.kv["clip.vision.block_count"] = gguf::Value::u32(1);
  m.kv["clip.vision.attention.head_count"] = gguf::Value::u32(2);
  m.kv["clip.vision.attention.layer_norm_epsilon"] = gguf::Value::f32(1e-6f);
  m.kv["clip.use_gelu"] = gguf::Value::boolean(true);
  m.kv["clip.vision.projector.scale_factor"] = gguf::Value::u32(2);
  m.kv["clip.vision.image_mean"] = gguf::Value::f32_array({0.5f, 0.5f, 0.5f});
  m.kv["clip.vision.image_std"] = gguf::Value::f32_array({0.5f, 0.5f, 0.5f});
  SplitMix64 rng{7};
  auto t = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = static_cast<float>(rng.uniform() * 0.4 - 0.2);
    m.tensors[name] = {std::move(shape), std::move(v)};
  };
  t("v.patch_embd.weight", {D, 3, P, P});
  t("v.patch_embd.bias", {D});
  t("v.position_embd.weight", {N, D});
  for (const char* s : {"ln1", "ln2"}) {
    t(std::string("v.blk.0.") + s + ".weight", {D});
    t(std::string("v.blk.0.") + s + ".bias", {D});
  }
  for (const char* s : {"attn_q", "attn_k", "attn_v", "attn_out"}) {
    t(std::string("v.blk.0.") + s + ".weight", {D, D});
    t(std::string("v.blk.0.") + s + ".bias", {D});
  }
  t("v.blk.0.ffn_up.weight", {FF, D});
  t("v.blk.0.ffn_up.bias", {FF});
  t("v.blk.0.ffn_down.weight", {D, FF});
  t("v.blk.0.ffn_down.bias", {D});
  t("v.post_ln.weight", {D});
  t("v.post_ln.bias", {D});
  t("mm.soft_emb_norm.weight", {D});
  t("mm.input_projection.weight", {D, TEXT});
  return m;
}

inline std::string write_mmproj(const SynthMmproj& m, const std::string& name) {
  gguf::Writer w;
  for (const auto& [k, v] : m.kv) w.set(k, v);
  for (const auto& [n, t] : m.tensors) {
    Status st = w.add_tensor(n, QType::F32, t.shape, t.data.data());
    EXPECT_TRUE(st) << st.message();
  }
  const std::string path = tmp_path(name);
  Status st = w.write(path);
  EXPECT_TRUE(st) << st.message();
  return path;
}

}  // namespace sustain::test
