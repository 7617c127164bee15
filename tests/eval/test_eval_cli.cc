// `sustain synth --preset needle-retriever` and `sustain eval needle / kl`
// driven through the real binary.
#include <cmath>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "e2e/cli_runner.h"
#include "test_util.h"

namespace sustain::test {
namespace {

std::string retriever(const std::string& variant) {
  const std::string path = tmp_path("cli-retriever-" + variant + ".gguf");
  const CliResult r =
      run_cli("synth --preset needle-retriever --variant " + variant + " -o " + path);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return path;
}

TEST(EvalCli, NeedleJsonOnGeneratedCases) {
  const std::string m = retriever("default");
  const std::string cases = tmp_path("cli-cases.txt");
  const CliResult r = run_cli("eval needle -m " + m +
                              " --ctx 128,256 --depths 0.2,0.8 --trials 2 --seed 5 -t 2 --json "
                              "--write-cases " + cases + " -ctk f16,q8_0 -ctv f16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["total"], 16);
  EXPECT_EQ(j["correct"], 16);
  ASSERT_EQ(j["configs"].size(), 2u);
  EXPECT_EQ(j["configs"][1]["cache_type_k"], "q8_0");
  ASSERT_EQ(j["cells"].size(), 4u);
  for (const auto& c : j["cells"]) {
    EXPECT_EQ(c["total"], 4);  // 2 trials × 2 configs
    EXPECT_EQ(c["correct"], 4);
  }
  // The written cases run as given and give the same answer.
  const CliResult again = run_cli("eval needle -m " + m + " --cases " + cases + " -t 2 --json");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(again.out)["correct"], 8);
}

TEST(EvalCli, NeedleControlFailsAndErrorsAreNamed) {
  const std::string m = retriever("control");
  // Without the position head, a far-back needle is found at about chance
  // (1/64). Near the start of a short prompt the control still has an edge:
  // layer 0 then averages few keys, so the needle's key stands out.
  const CliResult r =
      run_cli("eval needle -m " + m + " --ctx 1024 --depths 0.5,0.7,0.9 --trials 2 -t 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["total"], 6);
  EXPECT_LE(j["correct"].get<int>(), 1);
  // Both page layouts of q4_0 run end to end; a bad layout, here and in
  // serve, is named.
  for (const char* layout : {"tiled", "rows"}) {
    const CliResult q4 = run_cli("eval needle -m " + m +
                                 " --ctx 256 --depths 0.5 --trials 1 -t 2 -ctk q4_0 -ctv q4_0 "
                                 "--kv-layout " + layout + " --json");
    ASSERT_EQ(q4.exit_code, 0) << layout << ": " << q4.err;
    EXPECT_EQ(nlohmann::json::parse(q4.out)["total"], 1) << layout;
  }
  for (const std::string cmd : {"eval needle", "serve"}) {
    const CliResult bad_layout = run_cli(cmd + " -m " + m + " --kv-layout diagonal");
    EXPECT_NE(bad_layout.exit_code, 0) << cmd;
    EXPECT_NE(bad_layout.err.find("--kv-layout: diagonal"), std::string::npos) << bad_layout.err;
  }
  const CliResult bad = run_cli("eval needle -m " + m + " -ctk q3_0");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("'q3_0'"), std::string::npos) << bad.err;
  const CliResult bad_cases = run_cli("eval needle -m " + m + " --cases " + tmp_path("none.txt"));
  EXPECT_NE(bad_cases.exit_code, 0);
  EXPECT_NE(bad_cases.err.find("none.txt"), std::string::npos) << bad_cases.err;
  const CliResult bad_variant = run_cli("synth --preset needle-retriever --variant cut9 -o " +
                                        tmp_path("x.gguf"));
  EXPECT_NE(bad_variant.exit_code, 0);
  EXPECT_NE(bad_variant.err.find("cut9"), std::string::npos) << bad_variant.err;
}

TEST(EvalCli, KlSavedBaselineMatchesRecomputed) {
  const std::string m = retriever("default");
  const std::string base = tmp_path("cli-kl-base.bin");
  // Recomputed baseline, q4_0 K and V; the baseline is saved with top-16 of 512.
  const CliResult full =
      run_cli("eval kl -m " + m + " --synthetic needle -c 600 --buckets 256 -ctk q4_0 -ctv q4_0 "
              "--save-base " + base + " --top-k 16 -t 2 --json");
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const CliResult saved = run_cli("eval kl -m " + m + " --base-file " + base +
                                  " --buckets 256 -ctk q4_0 -ctv q4_0 -t 2 --json");
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  const auto jf = nlohmann::json::parse(full.out)["runs"][0]["buckets"];
  const auto js = nlohmann::json::parse(saved.out)["runs"][0]["buckets"];
  ASSERT_EQ(jf.size(), 3u);  // [0, 256), [256, 600), all
  ASSERT_EQ(js.size(), 3u);
  for (size_t b = 0; b < 3; ++b) {
    const double kl = jf[b]["kl"]["mean"], lo = js[b]["kl"]["mean"], hi = js[b]["kl_upper_mean"];
    EXPECT_LE(lo, kl * (1 + 1e-6) + 1e-12) << b;
    EXPECT_GE(hi, kl * (1 - 1e-6) - 1e-12) << b;
    EXPECT_NEAR(double(js[b]["ppl_base"]), double(jf[b]["ppl_base"]), 1e-4 * double(jf[b]["ppl_base"]));
    EXPECT_NEAR(double(js[b]["same_top1"]), double(jf[b]["same_top1"]), 1e-12);
  }
  // The same model and format on both sides: KL 0, every top-1 the same.
  const CliResult same = run_cli("eval kl -m " + m + " --synthetic random -c 300 -t 2 --json");
  ASSERT_EQ(same.exit_code, 0) << same.err;
  const auto all = nlohmann::json::parse(same.out)["runs"][0]["buckets"].back();
  EXPECT_EQ(all["n"], 300);
  EXPECT_EQ(double(all["kl"]["max"]), 0.0);
  EXPECT_EQ(double(all["same_top1"]), 1.0);
  EXPECT_DOUBLE_EQ(double(all["ppl_ratio"]), 1.0);
}

// The tiled and row-by-row page layouts of one KV format, one as the
// baseline and one as the test: the layout's own cost, which is the two
// integer kernels' rounding, small; and a bad layout is named.
TEST(EvalCli, KlOfTheKvLayout) {
  const std::string m = retriever("dense");
  // fp8's tiled kernel needs AVX512_BF16; without it tiled pages are read
  // back into rows and the two layouts compute the same numbers.
#if defined(__x86_64__)
  const bool fp8_kernel = __builtin_cpu_supports("avx512bf16");
#else
  const bool fp8_kernel = false;
#endif
  for (const std::string kv : {"q4_0", "fp8"}) {
    SCOPED_TRACE(kv);
    const CliResult r =
        run_cli("eval kl -m " + m + " --synthetic random -c 300 --buckets 150 -ctk " + kv +
                " -ctv " + kv + " --base-ctk " + kv + " --base-ctv " + kv +
                " --base-kv-layout rows -t 2 --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_NE(j.dump().find(kv + "/" + kv + " rows"), std::string::npos) << j.dump();
    const auto all = j["runs"][0]["buckets"].back();
    EXPECT_EQ(all["n"], 300);
    // Not 0: the layout switch reaches the kernels (identical configurations
    // give exactly 0, KlSavedBaselineMatchesRecomputed).
    if (kv == "q4_0" || fp8_kernel)
      EXPECT_GT(double(all["kl"]["mean"]), 0.0) << all;
    else
      EXPECT_EQ(double(all["kl"]["mean"]), 0.0) << all;
    EXPECT_LT(double(all["kl"]["mean"]), 1e-3) << all;
    EXPECT_GT(double(all["same_top1"]), 0.9) << all;
  }
  const CliResult bad = run_cli("eval kl -m " + m + " --synthetic random -c 64 --kv-layout diagonal");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--kv-layout"), std::string::npos) << bad.err;
}

TEST(EvalCli, KlNeedsExactlyOneInput) {
  const std::string m = retriever("default");
  const CliResult r = run_cli("eval kl -m " + m + " -c 64");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("exactly one of"), std::string::npos) << r.err;
  const CliResult bad = run_cli("eval kl -m " + m + " --base-file " + tmp_path("missing.bin"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("missing.bin"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace sustain::test
