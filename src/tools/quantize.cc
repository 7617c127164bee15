#include "tools/quantize.h"

#include <chrono>
#include <cmath>

#include "gguf/gguf.h"
#include "model/arch_config.h"
#include "model/weights.h"

namespace sustain::tools {
namespace {

// Role of a tensor from its GGUF name, for files of any llama-like layout.
TensorRole role_from_name(const std::string& n) {
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  if (n == "token_embd.weight") return TensorRole::kTokenEmbd;
  if (n == "output.weight") return TensorRole::kOutput;
  if (n == "output_norm.weight") return TensorRole::kOutputNorm;
  if (has("attn_v.weight")) return TensorRole::kAttnV;
  if (has("attn_k.weight")) return TensorRole::kAttnK;
  if (has("attn_q.weight")) return TensorRole::kAttnQ;
  if (has("attn_output.weight")) return TensorRole::kAttnOutput;
  if (has("ffn_gate_inp")) return TensorRole::kFfnGateInp;
  if (has("ffn_down_exps")) return TensorRole::kFfnDownExps;
  if (has("ffn_gate_exps")) return TensorRole::kFfnGateExps;
  if (has("ffn_up_exps")) return TensorRole::kFfnUpExps;
  if (has("ffn_down")) return TensorRole::kFfnDown;
  if (has("ffn_gate")) return TensorRole::kFfnGate;
  if (has("ffn_up")) return TensorRole::kFfnUp;
  if (has("attn_qkv.weight")) return TensorRole::kSsmQkv;
  return TensorRole::kAttnNorm;  // any other tensor: no special rule applies
}

// Only 2-D "*.weight" tensors (and 3-D stacks of expert matrices) that are
// not norms or a mixture of experts' router get converted, as llama.cpp does.
bool convertible(const gguf::TensorInfo& t) {
  const std::string& n = t.name;
  const bool is_weight = n.size() >= 6 && n.compare(n.size() - 6, 6, "weight") == 0;
  return (t.shape.size() == 2 || t.shape.size() == 3) && is_weight &&
         n.find("_norm.weight") == std::string::npos &&
         n.find("ffn_gate_inp.weight") == std::string::npos &&
         n.find("ssm_conv1d.weight") == std::string::npos;
}

}  // namespace

std::vector<QType> plan_file_types(const gguf::File& in, FileType type) {
  // The type mix needs the architecture's layer count; files of other
  // architectures still quantize, with the rules applied by tensor name.
  ArchConfig cfg;
  if (auto c = arch_config_from_gguf(in); c.has_value()) {
    cfg = *c;
  } else {
    cfg.tied_output = in.find_tensor("output.weight") == nullptr;
  }

  std::vector<WeightSpec> specs;
  for (const auto& t : in.tensors()) {
    int layer = -1;
    if (t.name.rfind("blk.", 0) == 0) layer = std::atoi(t.name.c_str() + 4);
    specs.push_back({t.name, convertible(t) ? role_from_name(t.name) : TensorRole::kAttnNorm,
                     layer, convertible(t) ? t.shape : std::vector<int64_t>{int64_t(t.n_elements)}});
  }
  std::vector<QType> types = plan_tensor_types(cfg, specs, type);
  for (size_t i = 0; i < types.size(); ++i)
    if (!convertible(in.tensors()[i])) types[i] = in.tensors()[i].type;
  return types;

}

Expected<QuantizeResult> quantize_file(const std::string& in_path, const std::string& out_path,
                                       const QuantizeOptions& opt, ThreadPool& pool) {
  const auto t0 = std::chrono::steady_clock::now();
  SUSTAIN_ASSIGN_OR_RETURN(gguf::File in, gguf::File::open(in_path));
  if (in_path == out_path)
    return error(Code::kInvalidArgument, "output path equals input path '{}'", in_path);

  std::vector<QType> types = plan_file_types(in, opt.type);

  gguf::Writer w;
  for (const auto& [k, v] : in.metadata()) {
    if (k == "general.alignment") continue;
    w.set(k, v);
  }
  SUSTAIN_TRY(w.set_alignment(static_cast<uint32_t>(in.alignment())));
  w.set_u32("general.file_type", file_type_info(opt.type).gguf_file_type);
  w.set_u32("general.quantization_version", 2);

  QuantizeResult res;
  for (size_t i = 0; i < in.tensors().size(); ++i) {
    const auto& t = in.tensors()[i];
    const QType dst = types[i];
    if (dst != t.type && !qtype_traits(t.type).dequantize)
      return error(Code::kUnsupported, "{}: tensor `{}` is {}, which sustain cannot read values of",
                   in_path, t.name, qtype_name(t.type));
    if (dst != t.type && !qtype_traits(dst).quantize)
      return error(Code::kUnsupported, "cannot write {} for tensor `{}`", qtype_name(dst), t.name);
    SUSTAIN_TRY(w.add_tensor(t.name, dst, t.shape, nullptr));
  }
  SUSTAIN_TRY(w.begin(out_path));

  double total_sq = 0.0, total_ref_sq = 0.0;
  uint64_t total_n = 0;
  std::vector<uint8_t> out_bytes;
  for (size_t i = 0; i < in.tensors().size(); ++i) {
    const auto& t = in.tensors()[i];
    TensorQuantStats st;
    st.name = t.name;
    st.shape = t.shape;
    st.src = t.type;
    st.dst = types[i];
    st.n_elements = t.n_elements;
    st.src_bytes = t.n_bytes;
    st.dst_bytes = w.tensor_bytes(i);
    if (st.dst == st.src) {
      st.copied = true;
      SUSTAIN_TRY(w.write_tensor_data(t.data, t.n_bytes));
    } else {
      const int64_t row_len = t.shape.back();
      const int64_t n_rows = static_cast<int64_t>(t.n_elements / static_cast<uint64_t>(row_len));
      const uint64_t src_row = qtype_row_bytes(st.src, row_len);
      const uint64_t dst_row = qtype_row_bytes(st.dst, row_len);
      out_bytes.resize(st.dst_bytes);
      const auto& src_tr = qtype_traits(st.src);
      const auto& dst_tr = qtype_traits(st.dst);
      std::vector<double> err(pool.size(), 0.0), ref(pool.size(), 0.0);
      pool.parallel_for_dynamic(static_cast<size_t>(n_rows), 8, [&](size_t a, size_t b, int th) {
        std::vector<float> x(row_len), y(row_len);
        double e = 0.0, s = 0.0;
        for (size_t r = a; r < b; ++r) {
          src_tr.dequantize(t.data + r * src_row, x.data(), row_len);
          uint8_t* q = out_bytes.data() + r * dst_row;
          dst_tr.quantize(x.data(), q, row_len);
          dst_tr.dequantize(q, y.data(), row_len);
          for (int64_t j = 0; j < row_len; ++j) {
            const double d = double{y[j]} - double{x[j]};
            e += d * d;
            s += double{x[j]} * double{x[j]};
          }
        }
        err[th] += e;
        ref[th] += s;
      });
      double e = 0.0, s = 0.0;
      for (size_t k = 0; k < err.size(); ++k) {
        e += err[k];
        s += ref[k];
      }
      st.rmse = std::sqrt(e / static_cast<double>(t.n_elements));
      st.rel_rmse = s > 0 ? std::sqrt(e / s) : 0.0;
      total_sq += e;
      total_ref_sq += s;
      total_n += t.n_elements;
      SUSTAIN_TRY(w.write_tensor_data(out_bytes.data(), out_bytes.size()));
    }
    res.src_bytes += st.src_bytes;
    res.dst_bytes += st.dst_bytes;
    if (opt.progress) opt.progress(i, in.tensors().size(), st);
    res.tensors.push_back(std::move(st));
  }
  SUSTAIN_TRY(w.finish());
  res.total_rmse = total_n ? std::sqrt(total_sq / static_cast<double>(total_n)) : 0.0;
  res.total_rel_rmse = total_ref_sq > 0 ? std::sqrt(total_sq / total_ref_sq) : 0.0;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace sustain::tools
