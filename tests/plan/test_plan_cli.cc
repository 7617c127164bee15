// `sustain plan` end to end: the published figures through the command line,
// the JSON object's fields, flag errors, weights from a file equal to the
// preset's plan, and the plan's total against the measured peak RSS of
// `sustain run` on the same model.
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "e2e/cli_runner.h"
#include "test_util.h"

extern char** environ;

namespace sustain::test {
namespace {

nlohmann::json plan_json(const std::string& args) {
  const CliResult r = run_cli("plan --json " + args);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  return j;
}

TEST(PlanCli, JsonFields) {
  const auto j = plan_json("--preset qwen3-4b -c 32768 --devices 16G --bandwidth 100");
  for (const char* k : {"weights_bytes", "kv_bytes", "kv_bytes_per_token", "max_ctx",
                        "max_parallel", "total_bytes", "scratch_bytes", "fits", "verdict",
                        "devices", "speed", "weights", "host", "kv_pages", "kv_page_bytes"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["kv_bytes_per_token"].get<uint64_t>(), 147456u);  // 2 × 36 × 8 × 128 × 2
  EXPECT_EQ(j["kv_bytes"].get<uint64_t>(), uint64_t{32768} * 147456);
  EXPECT_EQ(j["k_type"], "f16");
  ASSERT_EQ(j["devices"].size(), 1u);
  const auto& d = j["devices"][0];
  EXPECT_EQ(d["capacity_bytes"].get<uint64_t>(), uint64_t{16} << 30);
  // With --devices the host costs (tokenizer, runtime) are not on the device.
  EXPECT_EQ(d["total_bytes"].get<uint64_t>() + j["host"]["total_bytes"].get<uint64_t>(),
            j["total_bytes"].get<uint64_t>());
  EXPECT_GT(j["weights_bytes"].get<uint64_t>(), uint64_t{2} << 30);  // Q4_K_M 4B: ~2.3 GiB
  EXPECT_LT(j["weights_bytes"].get<uint64_t>(), uint64_t{3} << 30);
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_GT(j["max_ctx"].get<int64_t>(), 32768);
  ASSERT_TRUE(j["speed"].is_object());
  const auto& pts = j["speed"]["points"];
  ASSERT_GE(pts.size(), 4u);
  EXPECT_EQ(pts[0]["ctx"], 0);
  for (size_t i = 1; i < pts.size(); ++i)
    EXPECT_LT(pts[i]["tok_s"].get<double>(), pts[i - 1]["tok_s"].get<double>());
  // The text form carries the same verdict.
  const CliResult t = run_cli("plan --preset qwen3-4b -c 32768 --devices 16G");
  EXPECT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find(j["verdict"].get<std::string>()), std::string::npos) << t.out;
}

// A mixture of experts: every expert counts in memory, only the used ones in
// the bytes a decode step reads. Qwen3-30B-A3B's expert stacks are ~94% of
// its weights and a token uses 8 of 128, so a step reads about a tenth.
TEST(PlanCli, MoeStepReadsOnlyActiveExperts) {
  const auto j = plan_json("--preset qwen3-30b-a3b --type Q4_K_M -c 4096 --bandwidth 25");
  const double total = j["weights_bytes"].get<double>();
  const double step = j["weights"]["step_bytes"].get<double>();
  EXPECT_GT(total, 15e9);
  EXPECT_GT(step, 0.05 * total);
  EXPECT_LT(step, 0.15 * total);
  // The speed model divides by the active bytes, not the 17 GB.
  const double tok_s = j["speed"]["points"][0]["tok_s"].get<double>();
  EXPECT_GT(tok_s, 25e9 / total * 5);
}

TEST(PlanCli, PublishedFigures) {
  // Seed 000 §3.1: Llama 3 8B shape, f16, 32K → 4294967296 B ≈ 4.29 GB.
  auto j = plan_json("--preset llama-3.1-8b -c 32768 -ctk f16 -ctv f16");
  EXPECT_EQ(j["kv_bytes_per_token"].get<uint64_t>(), 131072u);
  EXPECT_EQ(j["kv_bytes"].get<uint64_t>(), 4294967296u);
  // vLLM: Qwen3-4B, 11.47 GiB bf16 budget → 83520 tokens (≈ 83.5K), fp8 twice.
  j = plan_json("--preset qwen3-4b -ctk bf16 -ctv bf16 --kv-budget 11.47GiB");
  EXPECT_EQ(j["kv_budget"]["tokens"].get<int64_t>(), 83520);
  j = plan_json("--preset qwen3-4b -ctk fp8 -ctv fp8 --kv-budget 11.47GiB --parallel 2");
  EXPECT_EQ(j["kv_budget"]["tokens"].get<int64_t>(), 167040);
  EXPECT_EQ(j["kv_budget"]["tokens_per_sequence"].get<int64_t>(), 83520);
}

TEST(PlanCli, DeviceSplit) {
  const auto j = plan_json(
      "--preset llama-3.1-8b -c 32768 --devices 16G,12G --split layer --ratio 2,1.5 --headroom "
      "15%");
  ASSERT_EQ(j["devices"].size(), 2u);
  EXPECT_EQ(j["split"], "layer");
  uint64_t sum = 0, kv = 0;
  for (const auto& d : j["devices"]) {
    sum += d["total_bytes"].get<uint64_t>();
    kv += d["kv_bytes"].get<uint64_t>();
    EXPECT_EQ(d["fits"].get<bool>(),
              d["total_bytes"].get<uint64_t>() <= d["usable_bytes"].get<uint64_t>());
  }
  EXPECT_EQ(kv, j["kv_bytes"].get<uint64_t>());
  EXPECT_EQ(sum + j["host"]["total_bytes"].get<uint64_t>(), j["total_bytes"].get<uint64_t>());
  EXPECT_EQ(j["devices"][0]["layer_end"], 18);
  const auto r = plan_json("--preset llama-3.1-8b --devices 16G,12G --split row");
  EXPECT_EQ(r["split"], "tensor");  // "row" is accepted as llama.cpp's name for it
  EXPECT_EQ(r["devices"][0]["kv_heads"].get<int>() + r["devices"][1]["kv_heads"].get<int>(), 8);
}

TEST(PlanCli, DoesNotFit) {
  const auto j = plan_json("--preset llama-3.1-8b -c 131072 --parallel 4 --devices 16G");
  EXPECT_FALSE(j["fits"].get<bool>());
  EXPECT_EQ(j["verdict"].get<std::string>().rfind("does not fit", 0), 0u) << j["verdict"];
  EXPECT_LT(j["max_ctx"].get<int64_t>(), 131072);
  EXPECT_GT(j["max_ctx"].get<int64_t>(), 0);
}

// Gemma 3 27B at 128K: the 52 sliding-window layers keep their 1024-token
// windows in a pool of their own (one sequence's window before a step of
// 512 tokens: 49 pages of 32), the 10 global layers the whole context; each
// prefix snapshot adds a window (32 pages). Against the dense cache of all
// 62 layers that is about a sixth.
TEST(PlanCli, Gemma3KeepsOnlyTheWindowsOfItsSlidingLayers) {
  const auto j = plan_json("--preset gemma-3-27b -c 131072 --state-snapshots 0 --devices 64G");
  const uint64_t layer_token = 16 * 128 * 2 * 2;  // 16 KV heads × 128, K and V in f16
  ASSERT_TRUE(j["window"].is_object()) << j.dump();
  EXPECT_EQ(j["window"]["layers"].get<int>(), 52);
  EXPECT_EQ(j["window"]["pages"].get<int64_t>(), 49);
  EXPECT_EQ(j["kv_bytes_per_token"].get<uint64_t>(), 10 * layer_token);
  const uint64_t dense = 131072 * 62 * layer_token;
  EXPECT_EQ(j["kv_bytes"].get<uint64_t>(), 131072 * 10 * layer_token + 49 * 32 * 52 * layer_token);
  EXPECT_LT(j["kv_bytes"].get<uint64_t>() * 5, dense);
  const auto snaps = plan_json("--preset gemma-3-27b -c 131072 --state-snapshots 2 --devices 64G");
  EXPECT_EQ(snaps["window"]["pages"].get<int64_t>(), 49 + 2 * 32);
  // A model without windows has none.
  EXPECT_TRUE(plan_json("--preset qwen3-4b -c 4096")["window"].is_null());
}

// A projector by shape (--vision): the real Gemma 3 projector, without its
// file, counted like a sidecar file is.
// --spec mtp: the MTP block's own pool takes -ctkd / -ctvd as a draft
// model's does. qwen3.5-27b's block: 4 KV heads of 256, pages of 32, and a
// boundary hidden state (5120 f32) per page for its prefix cache.
TEST(PlanCli, MtpPoolTakesTheDraftKvFormats) {
  const std::string base = "--preset qwen3.5-27b --type Q4_K_M -c 32768 --spec mtp";
  const auto f16 = plan_json(base);
  const auto q4 = plan_json(base + " -ctkd q4_0 -ctvd q4_0");
  ASSERT_TRUE(f16["spec"].is_object() && q4["spec"].is_object());
  const uint64_t pages = f16["spec"]["kv_pages"].get<uint64_t>();
  EXPECT_EQ(q4["spec"]["kv_pages"].get<uint64_t>(), pages);
  constexpr uint64_t kBoundary = 5120 * 4;
  EXPECT_EQ(f16["spec"]["kv_bytes"].get<uint64_t>(), pages * (4 * (512 + 512) * 32 + kBoundary));
  EXPECT_EQ(q4["spec"]["kv_bytes"].get<uint64_t>(), pages * (4 * (144 + 144) * 32 + kBoundary));
  // The target's own KV is untouched by the draft formats.
  EXPECT_EQ(q4["kv_bytes"].get<uint64_t>(), f16["kv_bytes"].get<uint64_t>());
}

TEST(PlanCli, VisionShapeCountsAsProjector) {
  const auto base = plan_json("--preset gemma-3-27b -c 8192");
  const auto j = plan_json("--preset gemma-3-27b -c 8192 --vision gemma3");
  EXPECT_EQ(j["weights"]["projector_tensors"].get<int>(), 27 * 16 + 7);
  const uint64_t proj = j["weights"]["projector_bytes"].get<uint64_t>();
  // 0.42 B parameters, nearly all F16 (the published mmproj-f16 is ~0.85 GB).
  EXPECT_GT(proj, 800ull << 20);
  EXPECT_LT(proj, 820ull << 20);
  const uint64_t enc = j["projector_scratch_bytes"].get<uint64_t>();
  EXPECT_GT(enc, 256ull << 20);
  EXPECT_LT(enc, 512ull << 20);
  EXPECT_EQ(j["total_bytes"].get<uint64_t>() - base["total_bytes"].get<uint64_t>(), proj + enc);
  EXPECT_EQ(j["weights"]["step_bytes"], base["weights"]["step_bytes"]);
  const auto q = plan_json("--preset gemma-3-27b -c 8192 --vision gemma3 --vision-type Q8_0");
  EXPECT_LT(q["weights"]["projector_bytes"].get<uint64_t>(), proj * 3 / 4);
  for (const char* bad : {"--vision siglip", "--vision-type Q8_0", "--vision gemma3 --vision-type Q4_K",
                          "--vision gemma3 --vision-type nonsense"}) {
    const CliResult r = run_cli(std::string("plan --preset gemma-3-27b ") + bad);
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_NE(r.err.find("--vision"), std::string::npos) << bad << ": " << r.err;
  }
}

TEST(PlanCli, FlagErrors) {
  struct Case {
    const char* args;
    const char* needle;
  };
  const Case cases[] = {
      {"--preset qwen3-4b --devices 16X", "--devices '16X'"},
      {"--preset qwen3-4b --devices 16G --split diagonal", "--split 'diagonal'"},
      {"--preset qwen3-4b --headroom 150%", "--headroom '150%'"},
      {"--preset qwen3-4b --devices 16G,12G --ratio 1", "--ratio '1'"},
      {"--preset qwen3-4b --ratio 1,2", "--ratio '1,2' needs --devices"},
      {"--preset qwen3-4b --kv-budget lots", "--kv-budget 'lots'"},
      {"--preset qwen3-4b -ctk q9_9", "--cache-type-k 'q9_9'"},
      {"--preset qwen3-4b -ctv q4_k", "--cache-type-v 'q4_k'"},
      {"--preset no-such-model", "--preset 'no-such-model'"},
      {"--preset qwen3-4b --type Q3_XL", "--type 'Q3_XL'"},
      {"-m x.gguf --type Q8_0", "--type 'Q8_0' applies to --preset only"},
      {"", "-m FILE or --preset NAME"},
      {"--preset qwen3-4b -m x.gguf", "-m FILE or --preset NAME"},
      {"-m /nonexistent/model.gguf", "/nonexistent/model.gguf"},
      {"--preset qwen3-4b --bandwidth 100,200", "--bandwidth '100,200'"},
      {"--preset qwen3.5-27b --extra-bytes 12Q", "--extra-bytes '12Q'"},
      {"--preset qwen3.5-27b --extra-bytes -5", "--extra-bytes '-5'"},
      {"--preset qwen3-4b --spec draft", "--spec draft needs --draft-model"},
      {"--preset qwen3-4b --spec mtp", "no MTP/NextN block"},
      {"--preset qwen3-4b --spec draft -md /nonexistent/draft.gguf", "/nonexistent/draft.gguf"},
      {"--preset qwen3-4b --spec ngram --draft-max 40", "--draft-max"},
  };
  for (const Case& c : cases) {
    const CliResult r = run_cli(std::string("plan ") + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
  }
}

// A synth model written once for the file-based tests.
class PlanFile : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = tmp_path("plan_smollm2_q4km.gguf");
    const CliResult r = run_cli("synth --preset smollm2-135m --type Q4_K_M -o " + path_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static std::string path_;
};
std::string PlanFile::path_;

TEST_F(PlanFile, WeightsFromFileEqualPresetPlan) {
  const auto f = plan_json("-m " + path_);
  const auto p = plan_json("--preset smollm2-135m --type Q4_K_M");
  EXPECT_EQ(f["weights_bytes"], p["weights_bytes"]);
  EXPECT_EQ(f["weights"]["by_type"], p["weights"]["by_type"]);
  const CliResult info = run_cli("info --json " + path_);
  const auto i = nlohmann::json::parse(info.out, nullptr, false);
  ASSERT_FALSE(i.is_discarded());
  EXPECT_EQ(f["weights_bytes"], i["tensor_bytes"]);
  EXPECT_EQ(f["weights"]["projector_tensors"], 0);
}

// A projector file (the reference's tiny Gemma 3 mmproj) counts whole as
// projector bytes beside the model's weights, and its encoder's buffers for
// one image count on the host; a file that is not a projector is refused.
TEST_F(PlanFile, SidecarCountsAsProjector) {
  SUSTAIN_REQUIRE_REF();
  const std::string mm = ref_path("vision/models/mmproj-tinygemma3.gguf");
  const auto base = plan_json("-m " + path_);
  const auto j = plan_json("-m " + path_ + " --mmproj " + mm);
  const CliResult info = run_cli("info --json " + mm);
  const auto i = nlohmann::json::parse(info.out, nullptr, false);
  ASSERT_FALSE(i.is_discarded());
  const uint64_t w = base["weights_bytes"].get<uint64_t>();
  EXPECT_EQ(j["weights"]["projector_bytes"], i["tensor_bytes"]);
  EXPECT_EQ(j["weights"]["projector_tensors"].get<int>(), 71);
  EXPECT_EQ(j["weights_bytes"].get<uint64_t>(), w + i["tensor_bytes"].get<uint64_t>());
  // Not read by a text decode step.
  EXPECT_EQ(j["weights"]["step_bytes"], base["weights"]["step_bytes"]);
  // 256 patches of width 128 (FFN 512): the scores alone are 256 KiB; in all
  // a few MiB, counted in the total.
  const uint64_t enc = j["projector_scratch_bytes"].get<uint64_t>();
  EXPECT_GT(enc, 256u * 256 * 4);
  EXPECT_LT(enc, 16u << 20);
  EXPECT_EQ(j["total_bytes"].get<uint64_t>() - base["total_bytes"].get<uint64_t>(),
            i["tensor_bytes"].get<uint64_t>() + enc);
  const CliResult bad = run_cli("plan -m " + path_ + " --mmproj /nonexistent/mmproj.gguf");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("/nonexistent/mmproj.gguf"), std::string::npos) << bad.err;
  const CliResult text = run_cli("plan -m " + path_ + " --mmproj " + path_);
  EXPECT_NE(text.exit_code, 0);
  EXPECT_NE(text.err.find(path_), std::string::npos) << text.err;
}

// Peak RSS of a child process run without a shell (wait4 reports its own rusage).
long child_max_rss_kb(const std::vector<std::string>& args, int* exit_code) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  struct rusage ru {};
  if (wait4(pid, &status, 0, &ru) != pid) return -1;
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return ru.ru_maxrss;
}

// The plan's total is within 10% of the peak RSS `sustain run` reaches with
// the same model, context and threads (weights mapped and read, the KV pool
// touched at creation, workspace, tokenizer, process).
TEST_F(PlanFile, TotalWithinTenPercentOfPeakRss) {
  for (const char* ctx : {"2048", "8192"}) {
    int code = -1;
    const long kb = child_max_rss_kb(
        {SUSTAIN_BINARY, "run", "-m", path_, "-p", "hello world", "-n", "16", "-c", ctx, "-t", "2"},
        &code);
    ASSERT_EQ(code, 0);
    ASSERT_GT(kb, 0);
    const double rss = kb * 1024.0;
    const auto j = plan_json("-m " + path_ + " -c " + ctx + " -t 2");
    const double total = j["total_bytes"].get<double>();
    EXPECT_LT(std::abs(total - rss) / rss, 0.10)
        << "ctx " << ctx << ": plan " << total << " B, measured peak RSS " << rss << " B";
  }
}

}  // namespace
}  // namespace sustain::test
