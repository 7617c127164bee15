#include "plan/report.h"

#include <cctype>
#include <map>

#include <fmt/format.h>

namespace sustain::plan {
namespace {

// Bytes per tensor format, for the weights line.
std::map<std::string, uint64_t> bytes_by_type(const PlanInput& in) {
  std::map<std::string, uint64_t> m;
  for (const auto* list : {&in.tensors, &in.sidecar})
    for (const TensorEntry& t : *list) m[std::string(qtype_name(t.type))] += t.bytes;
  return m;
}

std::string kv_type_name(QType t) {
  std::string s(qtype_name(t));
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

nlohmann::ordered_json to_json(const PlanInput& in, const Plan& p, const std::string& source) {
  using J = nlohmann::ordered_json;
  const ArchConfig& c = in.arch;
  J j;
  j["source"] = source;
  j["model"] = {{"arch", arch_name(c.arch)},
                {"name", c.name},
                {"n_layer", c.n_layer},
                {"n_embd", c.n_embd},
                {"n_ff", c.n_ff},
                {"n_head", c.n_head},
                {"n_head_kv", c.n_head_kv},
                {"head_dim_k", c.head_dim_k},
                {"head_dim_v", c.head_dim_v},
                {"n_vocab", c.n_vocab},
                {"n_ctx_train", c.n_ctx_train}};
  j["k_type"] = kv_type_name(in.k_type);
  j["v_type"] = kv_type_name(in.v_type);
  j["page_tokens"] = in.page_tokens;
  j["n_ctx"] = in.n_ctx;
  j["n_parallel"] = in.n_parallel;
  j["ubatch"] = in.ubatch;
  j["headroom"] = in.headroom;
  j["weights_bytes"] = p.weights_bytes;
  J types = J::object();
  for (const auto& [name, b] : bytes_by_type(in)) types[name] = b;
  j["weights"] = {{"transformer_bytes", p.transformer_bytes},
                  {"projector_bytes", p.projector_bytes},
                  {"projector_tensors", p.projector_tensors},
                  {"mtp_bytes", p.mtp_bytes},
                  {"mtp_tensors", p.mtp_tensors},
                  {"other_bytes", p.other_bytes},
                  {"other_tensors", p.other_tensors},
                  {"step_bytes", p.step_weight_bytes},
                  {"by_type", types}};
  j["kv_bytes_per_token"] = p.kv_bytes_per_token;
  j["kv_page_bytes"] = p.kv_page_bytes;
  j["kv_pages"] = p.kv_pages;
  j["kv_tokens"] = p.kv_tokens;
  j["kv_bytes"] = p.kv_bytes;
  j["kv_layers"] = p.kv_layers;
  j["window"] = p.window_layers > 0 ? J{{"window", in.arch.sliding_window},
                                        {"layers", p.window_layers},
                                        {"pages", p.window_pages},
                                        {"page_bytes", p.window_page_bytes},
                                        {"bytes", p.window_bytes},
                                        {"snapshots", in.state_snapshots}}
                                     : J();
  j["state"] = {{"bytes_per_sequence", p.state_bytes_per_sequence},
                {"slots", p.state_slots},
                {"snapshots", in.state_snapshots},
                {"bytes", p.state_bytes}};
  j["scratch_bytes"] = p.scratch_bytes;
  j["projector_scratch_bytes"] = p.projector_scratch_bytes;
  j["logits_bytes"] = p.logits_bytes;
  j["spec"] = in.spec.on ? J{{"draft_max", in.spec.draft_max},
                             {"pool", p.spec_pool},
                             {"kv_pages", p.spec_kv_pages},
                             {"kv_bytes", p.spec_kv_bytes},
                             {"draft_weights_bytes", p.spec_weights_bytes},
                             {"draft_scratch_bytes", p.spec_scratch_bytes}}
                         : J();
  j["host"] = {{"runtime_bytes", p.host.runtime_bytes},
               {"tokenizer_bytes", p.host.tokenizer_bytes},
               {"metadata_bytes", p.host.metadata_bytes},
               {"norm_bytes", p.host.norm_bytes},
               {"total_bytes", p.host_bytes}};
  j["total_bytes"] = p.total_bytes;
  j["split"] = p.split ? split_name(in.split) : "none";
  J devs = J::array();
  for (const DeviceUse& u : p.devices)
    devs.push_back({{"name", u.name},
                    {"capacity_bytes", u.capacity},
                    {"usable_bytes", u.usable},
                    {"weights_bytes", u.weights},
                    {"kv_bytes", u.kv},
                    {"kv_bytes_per_token", u.kv_bytes_per_token},
                    {"window_bytes_per_token", u.window_bytes_per_token},
                    {"state_bytes", u.state},
                    {"scratch_bytes", u.scratch},
                    {"logits_bytes", u.logits},
                    {"host_bytes", u.host},
                    {"spec_bytes", u.spec},
                    {"total_bytes", u.total},
                    {"fits", u.fits},
                    {"layer_begin", u.layer_begin},
                    {"layer_end", u.layer_end},
                    {"kv_heads", u.kv_heads},
                    {"cut", u.cut},
                    {"bandwidth_gbps", u.bandwidth_gbps}});
  j["comm_bytes_per_token"] = p.comm_bytes_per_token;
  j["devices"] = devs;
  j["fits"] = p.fits;
  j["max_ctx"] = p.max_ctx;
  j["max_parallel"] = p.max_parallel;
  if (in.kv_budget_bytes > 0) {
    j["kv_budget"] = {{"bytes", in.kv_budget_bytes},
                      {"tokens", p.budget_tokens},
                      {"tokens_per_sequence", p.budget_tokens_per_sequence}};
  } else {
    j["kv_budget"] = nullptr;
  }
  if (p.speed.empty()) {
    j["speed"] = nullptr;
  } else {
    J pts = J::array();
    for (const SpeedPoint& s : p.speed)
      pts.push_back({{"ctx", s.ctx},
                     {"bytes_per_step", s.bytes_per_step},
                     {"tok_s", s.tok_s},
                     {"aggregate_tok_s", s.aggregate_tok_s}});
    J bw = J::array();
    for (const DeviceUse& u : p.devices) bw.push_back(u.bandwidth_gbps);
    j["speed"] = {{"bandwidth_gbps", bw}, {"points", pts}};
  }
  j["verdict"] = p.verdict;
  return j;
}

std::string to_text(const PlanInput& in, const Plan& p, const std::string& source) {
  const ArchConfig& c = in.arch;
  std::string s;
  auto line = [&](const std::string& x) { s += x + "\n"; };
  line(fmt::format("memory plan: {} ({}, {} layers, {} KV heads × {}), from {}", c.name,
                   arch_name(c.arch), c.n_layer, c.n_head_kv, c.head_dim_k, source));
  std::string types;
  for (const auto& [name, b] : bytes_by_type(in))
    types += fmt::format("{}{} {}", types.empty() ? "" : ", ", name, format_bytes(b));
  line(fmt::format("  weights     {:>12}  ({})", format_bytes(p.weights_bytes), types));
  if (p.projector_tensors)
    line(fmt::format("    projector {:>12}  ({} tensors)", format_bytes(p.projector_bytes),
                     p.projector_tensors));
  if (p.mtp_tensors)
    line(fmt::format("    MTP heads {:>12}  ({} tensors)", format_bytes(p.mtp_bytes),
                     p.mtp_tensors));
  if (p.other_tensors)
    line(fmt::format("    other     {:>12}  ({} tensors outside the weight table)",
                     format_bytes(p.other_bytes), p.other_tensors));
  line(fmt::format(
      "  KV cache    {:>12}  ({}/{} KV, {} B/token, {} pages of {} tokens = {} tokens{})",
      format_bytes(p.kv_bytes), kv_type_name(in.k_type), kv_type_name(in.v_type),
      p.kv_bytes_per_token, p.kv_pages, in.page_tokens, p.kv_tokens,
      in.kv_budget_bytes > 0
          ? fmt::format(" from a budget of {}", format_bytes(uint64_t(in.kv_budget_bytes)))
          : fmt::format(" for {} × {}", in.n_ctx, in.n_parallel)));
  if (c.is_hybrid())
    line(fmt::format("  KV layers   {:>12}  (of {} blocks: the others are Gated DeltaNet or MTP)",
                     p.kv_layers, c.n_layer));
  if (p.window_layers > 0)
    line(fmt::format(
        "    of which {:>10}  the {} sliding-window layers' own pool (window {} tokens): {} pages, "
        "{} a sequence × {} + {} a prefix snapshot × {}; the {} B/token are the {} global "
        "layers'",
        format_bytes(p.window_bytes), p.window_layers, c.sliding_window, p.window_pages,
        p.geometry.window_pages_per_seq(), in.n_parallel, p.geometry.window_pages_per_snapshot(),
        in.state_snapshots, p.kv_bytes_per_token, p.kv_layers - p.window_layers));
  if (p.state_slots > 0)
    line(fmt::format(
        "  state       {:>12}  (recurrent, {} per sequence × {} slots: {} sequences + {} "
        "prefix snapshots)",
        format_bytes(p.state_bytes), format_bytes(p.state_bytes_per_sequence), p.state_slots,
        in.n_parallel, in.state_snapshots));
  line(fmt::format("  workspace   {:>12}  (ubatch {} tokens{})", format_bytes(p.scratch_bytes),
                   in.ubatch, p.split ? ", on each device" : ""));
  if (p.projector_scratch_bytes)
    line(fmt::format("  image enc.  {:>12}  (the projector's buffers for one image at a time)",
                     format_bytes(p.projector_scratch_bytes)));
  line(fmt::format(
      "  logits      {:>12}{}", format_bytes(p.logits_bytes),
      in.spec.on ? fmt::format("  ({} verify rows per sequence)", 1 + in.spec.draft_max) : ""));
  if (p.spec_weights_bytes)
    line(fmt::format("  draft model {:>12}  (its weights; workspace {})",
                     format_bytes(p.spec_weights_bytes), format_bytes(p.spec_scratch_bytes)));
  if (p.spec_kv_pages)
    line(fmt::format("  spec KV     {:>12}  ({}'s own pool: {} pages of {} B, first device)",
                     format_bytes(p.spec_kv_bytes), p.spec_pool, p.spec_kv_pages,
                     in.spec.pool_geometry.page_bytes()));
  line(fmt::format("  host        {:>12}  (runtime, tokenizer, file header, norms)",
                   format_bytes(p.host_bytes)));
  line(fmt::format("  total       {:>12}  ({} bytes)", format_bytes(p.total_bytes), p.total_bytes));
  if (p.split) {
    line(fmt::format("devices ({} split, headroom {:.0f}%):", split_name(in.split),
                     in.headroom * 100));
    line(fmt::format("  {:<8} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}  {:<6} {}", "device",
                     "size", "usable", "weights", "KV", "state", "workspace", "total", "fits",
                     in.split == Split::kTensor ? "KV heads" : "layers"));
    for (const DeviceUse& u : p.devices)
      line(fmt::format(
          "  {:<8} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}  {:<6} {}", u.name,
          format_bytes(u.capacity), format_bytes(u.usable), format_bytes(u.weights),
          format_bytes(u.kv), format_bytes(u.state), format_bytes(u.scratch), format_bytes(u.total),
          u.fits ? "yes" : "NO",
          in.split == Split::kTensor ? fmt::format("{}", u.kv_heads)
                                  : fmt::format("{}-{}", u.layer_begin, u.layer_end - 1)));
    for (const DeviceUse& u : p.devices)
      if (!u.cut.empty()) line(fmt::format("  {}: {}", u.name, u.cut));
    if (p.comm_bytes_per_token > 0) {
      const double b = static_cast<double>(p.comm_bytes_per_token);
      line(fmt::format(
          "communication: {} sent per device per decoded token; over a link of 1 / 10 / 100 "
          "Gbit/s that is {:.2f} / {:.3f} / {:.4f} ms a token (latency not counted)",
          format_bytes(p.comm_bytes_per_token), b * 8 / 1e9 * 1e3, b * 8 / 1e10 * 1e3,
          b * 8 / 1e11 * 1e3));
    }
  }
  if (!p.speed.empty()) {
    std::string bw;
    for (const DeviceUse& u : p.devices)
      bw += fmt::format("{}{:.1f}", bw.empty() ? "" : ", ", u.bandwidth_gbps);
    line(
        fmt::format("decode speed, bandwidth model at {} GB/s (tok/s ≈ bandwidth ÷ bytes read "
                    "per step):",
                    bw));
    line(fmt::format(
        "  {:>9} {:>14} {:>10}{}", "context", "bytes/step", "tok/s",
        in.n_parallel > 1 ? fmt::format(" {:>14}", fmt::format("{} seqs", in.n_parallel)) : ""));
    for (const SpeedPoint& sp : p.speed)
      line(fmt::format("  {:>9} {:>14} {:>10.1f}{}", sp.ctx, format_bytes(sp.bytes_per_step),
                       sp.tok_s,
                       in.n_parallel > 1 ? fmt::format(" {:>14.1f}", sp.aggregate_tok_s) : ""));
  }
  line(p.verdict);
  return s;
}

}  // namespace sustain::plan
