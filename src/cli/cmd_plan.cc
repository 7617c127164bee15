// `sustain plan`: the memory budget of a model (a GGUF file, or a preset as
// the quantizer would write it) — weights, KV pool, workspace, host costs —
// on this machine or split over devices; the largest context and
// concurrency under a headroom; the bandwidth model's speed curve; a verdict.
// The arithmetic is in src/plan; this file gathers the inputs.
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "attention/attention.h"
#include "bench/bandwidth.h"
#include "bench/plan_input.h"
#include "cli/commands.h"
#include "cli/model_session.h"
#include "cli/spec_flags.h"
#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "model/arch_config.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "plan/parse.h"
#include "plan/plan.h"
#include "plan/report.h"
#include "tools/presets.h"
#include "tools/quant_mix.h"
#include "vision/projector.h"
#include "vision/shape.h"

namespace sustain::cli {
namespace {

struct PlanArgs {
  std::string model, preset, type = "Q4_K_M", mmproj, vision, vision_type = "F16";
  int64_t ctx = 4096;
  int parallel = 1;
  std::string cache_type_k = "f16", cache_type_v = "f16";
  int64_t batch = 512, ubatch = 512;
  int threads = 0;
  std::string devices, split = "layer", ratio, headroom = "15%", kv_budget, bandwidth, extra_bytes;
  int state_snapshots = -1;
  SpecArgs spec;  // the same --spec flags as serve: what speculation allocates
  bool json = false;
  bool type_given = false;  // --type was on the command line
};

// A preset's tensors in the formats `sustain synth` / `quantize` give them.
Status read_preset(const std::string& name, const std::string& type, plan::PlanInput& in) {
  const tools::Preset* p = tools::find_preset(name);
  if (!p)
    return error(Code::kNotFound, "--preset '{}' is not a preset (one of: {})", name,
                 tools::preset_names());
  const auto ft = tools::file_type_from_name(type);
  if (!ft)
    return error(Code::kInvalidArgument, "--type '{}' is not a file type (one of: {})", type,
                 tools::file_type_names());
  in.arch = p->arch;
  in.rope_freqs = p->llama3_rope;
  const auto table = default_weight_table(in.arch, p->llama3_rope);
  const auto types = tools::plan_tensor_types(in.arch, table, *ft);
  for (size_t i = 0; i < table.size(); ++i) {
    const WeightSpec& s = table[i];
    const uint64_t n_in = static_cast<uint64_t>(s.shape.back());
    const uint64_t rows = s.n_elements() / std::max<uint64_t>(n_in, 1);
    in.tensors.push_back({s.name, types[i], s.shape, rows * qtype_row_bytes(types[i], n_in)});
  }
  in.host = plan::default_host_costs(in.arch, in.tensors);
  // No file to measure: the GGUF header of a real vocabulary is about 32
  // bytes per token (strings, scores, types, merges; measured on synth files).
  in.host.metadata_bytes = uint64_t{in.arch.n_vocab} * 32;
  return Status::ok();
}

uint64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

// A KV geometry of `arch` without recurrent state, as the engine builds the
// draft model's (Model::kv_geometry) or the MTP block's (mtp_kv_geometry).
kv::KvGeometry pool_geometry(const ArchConfig& arch, int n_layer, QType k, QType v, int page) {
  kv::KvGeometry g;
  g.n_layer = n_layer;
  g.n_head_kv = static_cast<int>(arch.n_head_kv);
  g.head_dim_k = static_cast<int>(arch.head_dim_k);
  g.head_dim_v = static_cast<int>(arch.head_dim_v);
  g.k_type = k;
  g.v_type = v;
  g.page_tokens = page;
  return g;
}

// --spec: what the engine allocates for speculative decoding (engine/
// scheduler.cc: load_draft_model, the mtp options): verify rows of logits,
// a second state slot per sequence, and the draft model's or the MTP
// block's own KV pool, mirroring the target's.
Status spec_input(const PlanArgs& a, int threads, plan::PlanInput& in) {
  SUSTAIN_ASSIGN_OR_RETURN(const spec::Config c, spec_config(a.spec));
  if (!c.enabled()) return Status::ok();
  in.spec.on = true;
  in.spec.draft_max = c.draft_max;
  if (c.uses("draft")) {
    plan::PlanInput d;
    SUSTAIN_TRY(bench::read_plan_file(c.draft_model, d));
    if (d.arch.is_hybrid())
      return error(Code::kUnsupported,
                   "--draft-model {}: a {} model keeps a recurrent state that cannot be rolled "
                   "back after a rejected draft; use a transformer draft model",
                   c.draft_model, arch_name(d.arch.arch));
    for (const plan::TensorEntry& t : d.tensors) in.spec.draft_weights_bytes += t.bytes;
    in.spec.draft_scratch_bytes =
        plan::workspace_bytes(d.arch, in.ubatch, bench::kernel_scratch(d, in.ubatch, threads));
    in.spec.pool_name = "draft model " + c.draft_model;
    in.spec.pool_geometry = pool_geometry(d.arch, static_cast<int>(d.arch.n_kv_layer()),
                                          c.draft_k_type, c.draft_v_type, in.page_tokens);
    in.spec.pool_extra_tokens_per_sequence = c.draft_max + in.page_tokens;
  } else if (c.uses("mtp")) {
    if (in.arch.n_nextn == 0)
      return error(Code::kUnsupported,
                   "--spec mtp: the model has no MTP/NextN block ({}.nextn_predict_layers is 0)",
                   arch_name(in.arch.arch));
    in.spec.pool_name = "MTP block";
    in.spec.mtp = true;
    in.spec.pool_geometry = pool_geometry(in.arch, static_cast<int>(in.arch.n_nextn),
                                          c.draft_k_type, c.draft_v_type, in.page_tokens);
    in.spec.pool_extra_tokens_per_sequence = in.page_tokens;
    // Its prefix cache's boundary states (spec/mtp.h), one row a page.
    in.spec.pool_page_extra_bytes = sizeof(float) * static_cast<uint64_t>(in.arch.n_embd);
  }
  return Status::ok();
}

Status build_input(const PlanArgs& a, plan::PlanInput& in, std::string& source) {
  if (a.model.empty() == a.preset.empty())
    return error(Code::kInvalidArgument,
                 "give the model with -m FILE or --preset NAME (exactly one)");
  if (!a.model.empty()) {
    if (a.type_given)
      return error(Code::kInvalidArgument,
                   "--type '{}' applies to --preset only: a file's tensors count at their stored "
                   "formats (quantize it first with `sustain quantize`)",
                   a.type);
    SUSTAIN_TRY(bench::read_plan_file(a.model, in));
    source = a.model;
  } else {
    SUSTAIN_TRY(read_preset(a.preset, a.type, in));
    source = fmt::format("preset {} as {}", a.preset, a.type);
  }
  if (!a.mmproj.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(auto proj, vision::Projector::open(a.mmproj));
    for (const gguf::TensorInfo& t : proj.file().tensors())
      in.sidecar.push_back(bench::entry_of(t));
    in.projector_scratch_bytes = proj.encode_scratch_bytes();
  }
  if (!a.vision.empty()) {
    // A projector of a known shape, as if its mmproj file were given.
    if (!a.mmproj.empty())
      return error(Code::kInvalidArgument,
                   "--vision '{}' and --mmproj '{}': give the projector once (a file or a shape)",
                   a.vision, a.mmproj);
    const auto t = qtype_from_name(a.vision_type);
    if (!t)
      return error(Code::kInvalidArgument, "--vision-type '{}' is not a tensor format",
                   a.vision_type);
    auto shape = vision::projector_shape(a.vision, in.arch.n_embd, *t);
    if (!shape) return error(shape.status().code(), "--vision: {}", shape.status().message());
    for (vision::ShapeTensor& st : vision::projector_tensors(*shape))
      in.sidecar.push_back({std::move(st.name), st.type, std::move(st.shape), st.bytes});
    in.projector_scratch_bytes = vision::encode_scratch_bytes(*shape);
    source += fmt::format(" + {} projector ({})", a.vision, qtype_name(*t));
  } else if (a.vision_type != "F16") {
    return error(Code::kInvalidArgument, "--vision-type '{}' applies to --vision only",
                 a.vision_type);
  }
  SUSTAIN_ASSIGN_OR_RETURN(in.k_type, kv_type(a.cache_type_k, "--cache-type-k"));
  SUSTAIN_ASSIGN_OR_RETURN(in.v_type, kv_type(a.cache_type_v, "--cache-type-v"));
  in.n_ctx = a.ctx;
  in.n_parallel = a.parallel;
  // As the engine keeps them: 4 recurrent-state (or sliding-window)
  // snapshots per sequence by default.
  in.batch = std::min(std::max(a.batch, a.ubatch), a.ctx);
  if (in.arch.is_hybrid() || in.arch.sliding_window > 0)
    in.state_snapshots = a.state_snapshots >= 0 ? a.state_snapshots : 4 * a.parallel;
  if (!a.extra_bytes.empty()) {
    // Bytes of a file not given (a vision projector, say), placed as one.
    SUSTAIN_ASSIGN_OR_RETURN(uint64_t b, plan::parse_bytes(a.extra_bytes, "--extra-bytes"));
    plan::TensorEntry e;
    e.name = "mmproj (--extra-bytes)";
    e.bytes = b;
    in.sidecar.push_back(e);
  }
  // The workspace holds what one forward call computes at once, as open_session sizes it.
  in.ubatch = std::min({a.batch, a.ubatch, a.ctx});
  const int threads = a.threads > 0 ? a.threads : default_threads();
  in.kernel_scratch_bytes = bench::kernel_scratch(in, in.ubatch, threads);
  SUSTAIN_TRY(spec_input(a, threads, in));
  SUSTAIN_ASSIGN_OR_RETURN(in.headroom, plan::parse_percent(a.headroom, "--headroom"));
  SUSTAIN_ASSIGN_OR_RETURN(in.split, plan::parse_split(a.split, "--split"));
  if (!a.kv_budget.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(uint64_t b, plan::parse_bytes(a.kv_budget, "--kv-budget"));
    if (b == 0) return error(Code::kInvalidArgument, "--kv-budget '{}' is 0 bytes", a.kv_budget);
    in.kv_budget_bytes = static_cast<int64_t>(b);
  }
  std::vector<double> bw;
  if (a.bandwidth == "measure") {
    // This machine's sustained read bandwidth (what `sustain bench` measures),
    // with the threads the run would use; 512 MiB is far above any LLC.
    SUSTAIN_ASSIGN_OR_RETURN(auto m, bench::measure_bandwidth(threads, size_t{512} << 20, 3));
    bw.push_back(m.read_gbps_median);
  } else if (!a.bandwidth.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(bw, plan::parse_number_list(a.bandwidth, "--bandwidth"));
  }
  if (a.devices.empty()) {
    if (!a.ratio.empty())
      return error(Code::kInvalidArgument, "--ratio '{}' needs --devices", a.ratio);
    if (bw.size() > 1)
      return error(Code::kInvalidArgument,
                   "--bandwidth '{}' gives {} values for one device (give --devices)", a.bandwidth,
                   bw.size());
    in.host_capacity = physical_memory();
    if (in.host_capacity == 0)
      return error(Code::kUnavailable, "cannot read this machine's memory size; give --devices");
    in.host_bandwidth_gbps = bw.empty() ? 0.0 : bw[0];
    return Status::ok();
  }
  SUSTAIN_ASSIGN_OR_RETURN(auto sizes, plan::parse_byte_list(a.devices, "--devices"));
  std::vector<double> ratio;
  if (!a.ratio.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(ratio, plan::parse_number_list(a.ratio, "--ratio"));
    if (ratio.size() != sizes.size())
      return error(Code::kInvalidArgument, "--ratio '{}' has {} values for {} devices ('{}')",
                   a.ratio, ratio.size(), sizes.size(), a.devices);
  }
  if (bw.size() > 1 && bw.size() != sizes.size())
    return error(Code::kInvalidArgument, "--bandwidth '{}' has {} values for {} devices ('{}')",
                 a.bandwidth, bw.size(), sizes.size(), a.devices);
  for (size_t d = 0; d < sizes.size(); ++d) {
    plan::Device dv;
    dv.name = fmt::format("dev{}", d);
    dv.capacity = sizes[d];
    // Without --ratio, each device takes a share in proportion to its size.
    dv.ratio = ratio.empty() ? static_cast<double>(sizes[d]) : ratio[d];
    dv.bandwidth_gbps = bw.empty() ? 0.0 : bw[bw.size() == 1 ? 0 : d];
    in.devices.push_back(dv);
  }
  return Status::ok();
}

int run_plan(const PlanArgs& a) {
  plan::PlanInput in;
  std::string source;
  Status st = build_input(a, in, source);
  if (!st) return fail(st.message());
  auto p = plan::make_plan(in);
  if (!p) return fail(p.status().message());
  if (a.json) {
    std::printf("%s\n", plan::to_json(in, *p, source).dump(2).c_str());
  } else {
    std::fputs(plan::to_text(in, *p, source).c_str(), stdout);
  }
  // The answer is the report; "does not fit" is not an error of the command.
  return 0;
}

}  // namespace

Runner add_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* sub =
      app.add_subcommand("plan",
                         "memory budget: weights + KV + workspace per device, largest context and "
                         "concurrency under a headroom, bandwidth-model speed curve");
  sub->add_option("-m,--model", a->model, "GGUF model file (its tensor directory is read)");
  sub->add_option("--preset", a->preset, "a synth preset instead of a file (see synth --list)");
  CLI::Option* type =
      sub->add_option("--type", a->type, "with --preset: the file type the weights would have")
          ->capture_default_str();
  sub->add_option("--mmproj", a->mmproj, "a projector GGUF loaded beside the model");
  sub->add_option(
      "--vision", a->vision,
      "a projector of a known shape instead of a file: " + vision::projector_shape_names() +
          " (SigLIP-So400m at 896 px, 256 image tokens, as Gemma 3 4B-27B ship it), "
          "projecting to the model's width");
  sub->add_option("--vision-type", a->vision_type,
                  "with --vision: the format of its encoder matrices (F16 as published, Q8_0, "
                  "F32)")
      ->capture_default_str();
  sub->add_option("-c,--ctx-size", a->ctx, "context per sequence, tokens")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  sub->add_option("--parallel", a->parallel, "sequences at once (alias -np)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--cache-type-k", a->cache_type_k, "K cache format (alias -ctk)")
      ->capture_default_str();
  sub->add_option("--cache-type-v", a->cache_type_v, "V cache format (alias -ctv)")
      ->capture_default_str();
  sub->add_option("-b,--batch-size", a->batch, "prompt tokens per forward call")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  sub->add_option("--ubatch-size", a->ubatch, "tokens computed at once (alias -ub)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  sub->add_option("-t,--threads", a->threads, "worker threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  sub->add_option("--devices", a->devices,
                  "device memory sizes, comma-separated (16G,12G); default: this machine's RAM");
  sub->add_option("--split", a->split,
                  "how the model is split over devices: layer or tensor (alias row)")
      ->capture_default_str();
  sub->add_option("--ratio", a->ratio, "share of each device (2,1.5); default: by size");
  sub->add_option("--headroom", a->headroom, "memory kept free on each device")
      ->capture_default_str();
  sub->add_option("--kv-budget", a->kv_budget,
                  "size the KV pool by bytes instead (11.47GiB): how many tokens fit");
  sub->add_option("--bandwidth", a->bandwidth,
                  "memory bandwidth in GB/s (one, or one per device) for the speed curve; "
                  "'measure' measures this machine's");
  sub->add_option("--extra-bytes", a->extra_bytes,
                  "bytes of a further file held with the model, counted as a projector (0.9G)");
  add_spec_flags(sub, a->spec);
  sub->add_option("--state-snapshots", a->state_snapshots,
                  "hybrid models: recurrent-state snapshots for prefix reuse (-1 = 4 x --parallel)")
      ->check(CLI::Range(-1, 1 << 20));
  sub->add_flag("--json", a->json, "print the plan as JSON (see docs/plan.md)");
  return [a, type] {
    a->type_given = type->count() > 0;
    return run_plan(*a);
  };
}

}  // namespace sustain::cli
