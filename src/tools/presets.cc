#include "tools/presets.h"

#include "tools/chat_templates.h"

#include <cmath>

#include <fmt/format.h>

namespace sustain::tools {
namespace {

ArchConfig make_arch(Arch arch, std::string name, uint32_t n_layer, uint32_t n_embd, uint32_t n_ff,
                     uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t n_vocab,
                     uint32_t n_ctx, float rope_base, float rms_eps, bool tied) {
  ArchConfig c;
  c.arch = arch;
  c.name = std::move(name);
  c.n_layer = n_layer;
  c.n_embd = n_embd;
  c.n_ff = n_ff;
  c.n_head = n_head;
  c.n_head_kv = n_head_kv;
  c.head_dim_k = c.head_dim_v = c.rope_dim = head_dim;
  c.n_vocab = n_vocab;
  c.n_ctx_train = n_ctx;
  c.rope_freq_base = rope_base;
  c.rms_eps = rms_eps;
  c.tied_output = tied;
  return c;
}

// Llama 3.x: 128000 regular tokens, then 256 special tokens.
SynthVocabSpec llama3_vocab(std::string_view chat_template) {
  SynthVocabSpec v;
  v.model = "gpt2";
  v.pre = "llama-bpe";
  v.n_vocab = 128256;
  const char* named[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                         "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                         "<|reserved_special_token_2|>", "<|start_header_id|>",
                         "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"};
  uint32_t id = 128000;
  for (const char* s : named) v.specials.push_back({id++, s, true});
  for (int r = 3; id < 128256; ++r) v.specials.push_back({id++, fmt::format("<|reserved_special_token_{}|>", r), true});
  v.bos_id = 128000;
  v.eos_id = 128009;
  v.eot_id = 128009;
  v.add_bos = true;
  v.chat_template = std::string(chat_template);
  return v;
}

// Qwen 2.5 / 3: 151643 regular tokens, specials from 151643, padding to 151936
// (152064 for the 7B). `first_special` moves the specials for small test vocabularies.
SynthVocabSpec qwen_vocab(bool qwen3, uint32_t n_vocab, uint32_t first_special = 151643) {
  SynthVocabSpec v;
  v.model = "gpt2";
  v.pre = "qwen2";
  v.n_vocab = n_vocab;
  const char* control[] = {"<|endoftext|>",   "<|im_start|>",  "<|im_end|>",   "<|object_ref_start|>",
                           "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                           "<|quad_end|>",    "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                           "<|image_pad|>",   "<|video_pad|>"};
  uint32_t id = first_special;
  for (const char* s : control) v.specials.push_back({id++, s, true});
  const char* user[] = {"<tool_call>", "</tool_call>"};
  for (const char* s : user) v.specials.push_back({id++, s, false});
  const char* fim[] = {"<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                       "<|repo_name|>", "<|file_sep|>"};
  for (const char* s : fim) v.specials.push_back({id++, s, true});
  if (qwen3) {
    const char* q3[] = {"<tool_response>", "</tool_response>", "<think>", "</think>"};
    for (const char* s : q3) v.specials.push_back({id++, s, false});
  }
  v.bos_id = first_special;
  v.eos_id = first_special + 2;
  v.eot_id = first_special + 2;
  v.pad_id = first_special;
  v.add_bos = false;
  v.chat_template = std::string(qwen3 ? kChatTemplateQwen3 : kChatTemplateQwen25);
  return v;
}

SynthVocabSpec smollm2_vocab() {
  SynthVocabSpec v;
  v.model = "gpt2";
  v.pre = "smollm";
  v.n_vocab = 49152;
  const char* names[] = {"<|endoftext|>", "<|im_start|>",   "<|im_end|>",     "<repo_name>",
                         "<reponame>",    "<file_sep>",     "<filename>",     "<gh_stars>",
                         "<issue_start>", "<issue_comment>", "<issue_closed>", "<jupyter_start>",
                         "<jupyter_text>", "<jupyter_code>", "<jupyter_output>", "<jupyter_script>",
                         "<empty_output>"};
  uint32_t id = 0;
  for (const char* s : names) v.specials.push_back({id++, s, true});
  v.bos_id = 1;
  v.eos_id = 2;
  v.eot_id = 2;
  v.pad_id = 2;
  v.add_bos = false;
  return v;
}

// Mistral v0.3: SentencePiece, 32768 tokens, 768 control tokens after </s>.
SynthVocabSpec mistral_vocab() {
  SynthVocabSpec v;
  v.model = "llama";
  v.n_vocab = 32768;
  const char* named[] = {"[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                         "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"};
  uint32_t id = 3;
  for (const char* s : named) v.specials.push_back({id++, s, true});
  for (; id < 771; ++id) v.specials.push_back({id, fmt::format("[control_{}]", id - 2), true});
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  v.add_bos = true;
  return v;
}

// Gemma 3: SentencePiece with byte fallback; <pad> 0, <eos> 1, <bos> 2,
// <unk> 3, <mask> 4, the turn markers at 105 and 106 (262144 tokens for the
// 1B, 262208 with the image tokens for the multimodal sizes).
SynthVocabSpec gemma3_vocab(uint32_t n_vocab) {
  SynthVocabSpec v;
  v.model = "llama";
  v.n_vocab = n_vocab;
  const char* named[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<mask>"};
  uint32_t id = 0;
  for (const char* s : named) v.specials.push_back({id++, s, true});
  v.specials.push_back({105, "<start_of_turn>", true});
  v.specials.push_back({106, "<end_of_turn>", true});
  v.pad_id = 0;
  v.eos_id = 1;
  v.bos_id = 2;
  v.unk_id = 3;
  v.eot_id = 106;
  v.add_bos = true;
  return v;
}

// The 512-token SentencePiece layout of the shared tiny reference models.
SynthVocabSpec tiny_spm_vocab() {
  SynthVocabSpec v;
  v.model = "llama";
  v.n_vocab = 512;
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  v.add_bos = true;
  return v;
}

std::vector<Preset> build_presets() {
  std::vector<Preset> p;
  auto add = [&](Preset x) { p.push_back(std::move(x)); };
  const auto L = Arch::kLlama;
  const auto Q2 = Arch::kQwen2;
  const auto Q3 = Arch::kQwen3;
  // Qwen3 MoE: qwen3 attention, n_expert SwiGLU experts of width n_ff_exp per
  // block, n_expert_used per token (Qwen/Qwen3-30B-A3B's config.json).
  // Qwen 3.5 dense hybrid: every 4th block gated full attention, the rest
  // Gated DeltaNet with k_heads/v_heads heads of 128 and a 4-tap convolution,
  // rotary over a quarter of the head (mrope_section [11, 11, 10]), rope
  // base 1e7, n_mtp MTP blocks after the main ones (Qwen/Qwen3.5-*'s
  // config.json: full_attention_interval, linear_*, partial_rotary_factor,
  // mtp_num_hidden_layers).
  auto hybrid = [](ArchConfig c, uint32_t k_heads, uint32_t v_heads, uint32_t ssm_dim,
                   uint32_t n_mtp) {
    c.arch = Arch::kQwen35;
    c.n_nextn = n_mtp;
    c.n_layer += n_mtp;
    c.full_attention_interval = 4;
    c.ssm_conv_kernel = 4;
    c.ssm_head_dim = ssm_dim;
    c.ssm_n_k_heads = k_heads;
    c.ssm_n_v_heads = v_heads;
    c.ssm_inner = v_heads * ssm_dim;
    c.rope_dim = c.head_dim_k / 4;
    const uint32_t pairs = c.rope_dim / 2;  // [11, 11, 10] for 32 pairs
    c.rope_sections[0] = (pairs + 2) / 3;
    c.rope_sections[1] = (pairs + 2) / 3;
    c.rope_sections[2] = pairs - 2 * ((pairs + 2) / 3);
    return c;
  };
  // Gemma 3: 5 sliding-window blocks per global one, local RoPE base 1e4;
  // the multimodal sizes scale the global RoPE linearly by 8
  // (google/gemma-3-*'s config.json: sliding_window, sliding_window_pattern,
  // rope_local_base_freq, rope_scaling).
  auto gemma = [](ArchConfig c, uint32_t window, float linear) {
    c.arch = Arch::kGemma3;
    c.sliding_window = window;
    c.sliding_window_pattern = 6;
    c.rope_freq_base_swa = 10000.0f;
    if (linear > 1.0f) {
      c.rope_scaling = RopeScaling::kLinear;
      c.rope_scale_factor = linear;
      c.rope_orig_ctx = c.n_ctx_train;
    }
    return c;
  };
  auto moe = [](ArchConfig c, uint32_t n_expert, uint32_t n_used, uint32_t n_ff_exp) {
    c.arch = Arch::kQwen3Moe;
    c.n_expert = n_expert;
    c.n_expert_used = n_used;
    c.n_ff_exp = n_ff_exp;
    return c;
  };

  add({"smollm2-135m", "HuggingFaceTB/SmolLM2-135M-Instruct",
       make_arch(L, "SmolLM2 135M (synthetic)", 30, 576, 1536, 9, 3, 64, 49152, 8192, 100000.0f,
                 1e-5f, true),
       smollm2_vocab()});
  add({"qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B-Instruct",
       make_arch(Q2, "Qwen2.5 0.5B (synthetic)", 24, 896, 4864, 14, 2, 64, 151936, 32768,
                 1000000.0f, 1e-6f, true),
       qwen_vocab(false, 151936)});
  {
    Preset x{"llama-3.2-1b", "meta-llama/Llama-3.2-1B-Instruct",
             make_arch(L, "Llama 3.2 1B (synthetic)", 16, 2048, 8192, 32, 8, 64, 128256, 131072,
                       500000.0f, 1e-5f, true),
             llama3_vocab(kChatTemplateLlama32)};
    x.llama3_rope = true;
    x.llama3_factor = 32.0f;
    add(std::move(x));
  }
  add({"qwen3-4b", "Qwen/Qwen3-4B",
       make_arch(Q3, "Qwen3 4B (synthetic)", 36, 2560, 9728, 32, 8, 128, 151936, 40960,
                 1000000.0f, 1e-6f, true),
       qwen_vocab(true, 151936)});
  {
    Preset x{"llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct",
             make_arch(L, "Llama 3.1 8B (synthetic)", 32, 4096, 14336, 32, 8, 128, 128256, 131072,
                       500000.0f, 1e-5f, false),
             llama3_vocab(kChatTemplateLlama31)};
    x.llama3_rope = true;
    x.llama3_factor = 8.0f;
    add(std::move(x));
  }
  add({"qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct",
       make_arch(Q2, "Qwen2.5 7B (synthetic)", 28, 3584, 18944, 28, 4, 128, 152064, 32768,
                 1000000.0f, 1e-6f, false),
       qwen_vocab(false, 152064)});
  add({"mistral-7b", "mistralai/Mistral-7B-Instruct-v0.3",
       make_arch(L, "Mistral 7B v0.3 (synthetic)", 32, 4096, 14336, 32, 8, 128, 32768, 32768,
                 1000000.0f, 1e-5f, false),
       mistral_vocab()});
  add({"qwen3-32b", "Qwen/Qwen3-32B",
       make_arch(Q3, "Qwen3 32B (synthetic)", 64, 5120, 25600, 64, 8, 128, 151936, 40960,
                 1000000.0f, 1e-6f, false),
       qwen_vocab(true, 151936)});
  // 30.5B parameters, 3.3B active: 128 experts of width 768, 8 per token;
  // intermediate_size 6144 is unused (every block is a mixture).
  add({"qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B",
       moe(make_arch(Q3, "Qwen3 30B-A3B (synthetic)", 48, 2048, 6144, 32, 4, 128, 151936, 40960,
                     1000000.0f, 1e-6f, false),
           128, 8, 768),
       qwen_vocab(true, 151936)});
  // Gemma 3 1B (text only): 26 blocks, 4 query heads / 1 KV head of 256,
  // window 512, no RoPE scaling. 4B and 27B: window 1024, RoPE ×8 on the
  // global blocks; the 27B scales queries by n_embd / n_head (attn_params).
  add({"gemma-3-1b", "google/gemma-3-1b-it",
       gemma(make_arch(Arch::kGemma3, "Gemma 3 1B (synthetic)", 26, 1152, 6912, 4, 1, 256, 262144,
                       32768, 1000000.0f, 1e-6f, true),
             512, 1.0f),
       gemma3_vocab(262144)});
  add({"gemma-3-4b", "google/gemma-3-4b-it",
       gemma(make_arch(Arch::kGemma3, "Gemma 3 4B (synthetic)", 34, 2560, 10240, 8, 4, 256, 262208,
                       131072, 1000000.0f, 1e-6f, true),
             1024, 8.0f),
       gemma3_vocab(262208)});
  add({"gemma-3-27b", "google/gemma-3-27b-it",
       gemma(make_arch(Arch::kGemma3, "Gemma 3 27B (synthetic)", 62, 5376, 21504, 32, 16, 128,
                       262208, 131072, 1000000.0f, 1e-6f, true),
             1024, 8.0f),
       gemma3_vocab(262208)});
  // Qwen 3.5 4B: 32 blocks (8 full attention), 16 query / 4 KV heads of 256,
  // DeltaNet 16 key / 32 value heads of 128, tied embeddings, one MTP block.
  add({"qwen3.5-4b", "Qwen/Qwen3.5-4B",
       hybrid(make_arch(Arch::kQwen35, "Qwen3.5 4B (synthetic)", 32, 2560, 9216, 16, 4, 256,
                        248320, 262144, 10000000.0f, 1e-6f, true),
              16, 32, 128, 1),
       qwen_vocab(true, 248320, 248044)});
  // Qwen 3.5 27B: 64 blocks (16 full attention), 24 query / 4 KV heads of
  // 256, FFN 17408, DeltaNet 16 key / 48 value heads of 128, one MTP block:
  // the dual-GPU seed's model.
  add({"qwen3.5-27b", "Qwen/Qwen3.5-27B",
       hybrid(make_arch(Arch::kQwen35, "Qwen3.5 27B (synthetic)", 64, 5120, 17408, 24, 4, 256,
                        248320, 262144, 10000000.0f, 1e-6f, false),
              16, 48, 128, 1),
       qwen_vocab(true, 248320, 248044)});
  {
    Preset x{"llama-3.1-70b", "meta-llama/Llama-3.1-70B-Instruct",
             make_arch(L, "Llama 3.1 70B (synthetic)", 80, 8192, 28672, 64, 8, 128, 128256,
                       131072, 500000.0f, 1e-5f, false),
             llama3_vocab(kChatTemplateLlama31)};
    x.llama3_rope = true;
    x.llama3_factor = 8.0f;
    add(std::move(x));
  }
  // Tiny shapes for tests: the same layout as ../shared/ref's tiny models.
  {
    Preset x{"tiny-llama", "(test) the shape of tiny-llama in the reference data",
             make_arch(L, "tiny llama (synthetic)", 3, 256, 768, 8, 2, 32, 512, 2048, 10000.0f,
                       1e-5f, false),
             tiny_spm_vocab()};
    x.for_tests = true;
    add(std::move(x));
  }
  {
    Preset x{"tiny-qwen3", "(test) a small qwen3 with a BPE vocabulary",
             make_arch(Q3, "tiny qwen3 (synthetic)", 2, 256, 768, 8, 2, 64, 2048, 4096,
                       1000000.0f, 1e-6f, true),
             qwen_vocab(true, 2048, 2000)};
    x.for_tests = true;
    add(std::move(x));
  }
  {
    // Mistral v0.3's vocabulary ([TOOL_CALLS] and the other control tokens)
    // on a small llama: the server's Mistral tool-call tests.
    Preset x{"tiny-mistral", "(test) a small llama with Mistral v0.3's vocabulary",
             make_arch(L, "tiny mistral (synthetic)", 2, 128, 384, 4, 2, 32, 32768, 2048,
                       1000000.0f, 1e-5f, true),
             mistral_vocab()};
    x.for_tests = true;
    add(std::move(x));
  }
  {
    Preset x{"tiny-qwen3moe", "(test) the shape of tiny-qwen3moe in the reference data",
             moe(make_arch(Q3, "tiny qwen3moe (synthetic)", 3, 64, 128, 4, 2, 32, 2048, 4096,
                           1000000.0f, 1e-6f, true),
                 8, 2, 32),
             qwen_vocab(true, 2048, 2000)};
    x.for_tests = true;
    add(std::move(x));
  }
  {
    // 4 main blocks (0-2 DeltaNet, 3 full attention) and one MTP block; rotary
    // over 16 of 64 dims as sections [3, 3, 2, 0].
    ArchConfig c = hybrid(make_arch(Arch::kQwen35, "tiny qwen35 (synthetic)", 4, 64, 192, 4, 2,
                                    64, 2048, 4096, 10000000.0f, 1e-6f, true),
                          2, 4, 32, 1);
    Preset x{"tiny-qwen35", "(test) the shape of tiny-qwen35 in the reference data", c,
             qwen_vocab(true, 2048, 2000)};
    x.for_tests = true;
    add(std::move(x));
  }
  return p;
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = build_presets();
  return kPresets;
}

const Preset* find_preset(std::string_view name) {
  for (const auto& p : presets())
    if (p.name == name) return &p;
  return nullptr;
}

std::string preset_names() {
  std::string s;
  for (const auto& p : presets()) {
    if (!s.empty()) s += ", ";
    s += p.name;
  }
  return s;
}

std::vector<float> llama3_rope_factors(const Preset& p) {
  const uint32_t n = p.arch.rope_dim / 2;
  std::vector<float> f(n, 1.0f);
  const double low_wavelen = p.llama3_orig_ctx / p.llama3_low_freq;
  const double high_wavelen = p.llama3_orig_ctx / p.llama3_high_freq;
  for (uint32_t i = 0; i < n; ++i) {
    const double freq = 1.0 / std::pow(double{p.arch.rope_freq_base}, 2.0 * i / p.arch.rope_dim);
    const double wavelen = 2.0 * M_PI / freq;
    if (wavelen < high_wavelen) {
      f[i] = 1.0f;
    } else if (wavelen > low_wavelen) {
      f[i] = p.llama3_factor;
    } else {
      const double smooth = (p.llama3_orig_ctx / wavelen - p.llama3_low_freq) /
                            (p.llama3_high_freq - p.llama3_low_freq);
      f[i] = static_cast<float>(1.0 / ((1.0 - smooth) / p.llama3_factor + smooth));
    }
  }
  return f;
}

}  // namespace sustain::tools
