// Images through the real server (`sustain serve --mmproj`): the official
// openai npm client sends a data-URI image and gets the greedy answer
// `sustain run --image` gives; four image requests at once (-np 4) with
// n-gram speculation and with a draft model; and each malformed image part gets a 400 naming it.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "server/serve_process.h"

namespace sustain::test {
namespace {

using nlohmann::json;

const std::string kDir = SUSTAIN_SERVER_TEST_DIR;

std::string vision_model() { return ref_path("vision/models/tiny-gemma3-vlm-f32.gguf"); }
std::string mmproj() { return ref_path("vision/models/mmproj-tinygemma3-pool4.gguf"); }
std::string solid_png() { return ref_path("vision/images/solid32.png"); }

// The reference prompt's layout, with the image where the parts put it:
// <start_of_turn>user\n{text parts, image parts as <__media__>}<end_of_turn>\n...
// (the last newline written as a string: a template's own trailing newline
// is dropped, as Jinja does).
std::string template_file() {
  const std::string path = tmp_path("vision_chat_template.jinja");
  std::ofstream(path)
      << "{% for m in messages %}<start_of_turn>{{ m.role }}\n{% if m.content is string %}{{ "
         "m.content }}{% else %}{% for p in m.content %}{% if p.type == 'text' %}{{ p.text }}{% "
         "endif %}{% endfor %}{% endif %}<end_of_turn>\n{% endfor %}{{ '<start_of_turn>model\\n' }}";
  return path;
}

std::string base64(const std::string& bytes) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out += a[(v >> (6 * k)) & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = uint8_t(bytes[i]) << 16;
    out += a[(v >> 18) & 63];
    out += a[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += a[(v >> 18) & 63];
    out += a[(v >> 12) & 63];
    out += a[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json image_chat(const std::string& url, int max_tokens = 3) {
  return {{"messages",
           {{{"role", "user"},
             {"content",
              {{{"type", "text"}, {"text", "Look at this picture:\n\n"}},
               {{"type", "image_url"}, {"image_url", {{"url", url}}}},
               {{"type", "text"}, {"text", "\n\nWhat colour is it?"}}}}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"ignore_eos", true}};
}

std::unique_ptr<ServeProcess> start_vision(const std::string& extra, std::string* why) {
  return ServeProcess::start("-c 1024 -np 4 --mmproj " + mmproj() + " --chat-template-file " +
                                 template_file() + " " + extra,
                             why, vision_model());
}

std::optional<std::string> run(const std::string& cmd, int* code) {
  return run_shell(cmd, code);
}

TEST(ServerVision, OfficialClientGetsTheAnswerOfRunWithImage) {
  SUSTAIN_REQUIRE_REF();
  int code = 0;
  if (run("command -v node >/dev/null 2>&1", &code); code != 0)
    GTEST_SKIP() << "node is not installed";
  if (!std::filesystem::exists(kDir + "/node_modules/openai/package.json"))
    GTEST_SKIP() << "npm package openai is not installed (scripts/setup_npm.sh)";
  std::string why;
  auto srv = start_vision("--spec ngram --spec-gate off", &why);
  ASSERT_TRUE(srv) << why;
  const std::string log = tmp_path("openai_vision_stderr.txt");
  auto out = run("cd '" + kDir + "' && node openai_vision.mjs http://127.0.0.1:" +
                     std::to_string(srv->port()) + "/v1 " + solid_png() + " 2>" + log,
                 &code);
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(code, 0) << file_bytes(log) << "\nstdout: " << *out;
  const json r = json::parse(*out);
  // What `sustain run --image` prints for the same prompt
  // (CliVision.RunWithAnImageGeneratesTheReferenceTokens): llama.cpp's
  // greedy tokens 379 110 379.
  EXPECT_EQ(r["text"], " nok no");
  EXPECT_EQ(r["stream_text"], " nok no");
  EXPECT_EQ(r["prompt_tokens"], 61);  // 45 text tokens and 16 image positions
  EXPECT_EQ(r["remote"]["status"], 400);
  EXPECT_NE(r["remote"]["message"].get<std::string>().find("remote image URLs are not fetched"),
            std::string::npos)
      << r["remote"];
}

// -np 4: four image requests at once, two images, all with their answers;
// the second round reuses the cached image pages. With n-gram speculation,
// and with a draft model (the model drafting for itself, reading only the
// text around the images): requests with images draft, and the answers are
// the greedy ones (the random-weight model, blind to the image, is rarely
// right, which must not change them).
class ServerVisionSpec : public ::testing::TestWithParam<const char*> {};

TEST_P(ServerVisionSpec, ConcurrentImageRequests) {
  SUSTAIN_REQUIRE_REF();
  std::string why;
  const std::string spec = GetParam();
  const bool draft = spec == "draft";
  auto srv = start_vision(draft ? "--spec draft --spec-gate off --draft-model " + vision_model()
                                : "--spec ngram --spec-gate off",
                          &why);
  ASSERT_TRUE(srv) << why;
  const std::string solid = "data:image/png;base64," + base64(file_bytes(solid_png()));
  const std::string grad =
      "data:image/png;base64," + base64(file_bytes(ref_path("vision/images/gradient32.png")));
  std::vector<std::string> texts(4);
  std::vector<json> usage(4);
  std::vector<std::thread> th;
  for (int i = 0; i < 4; ++i)
    th.emplace_back([&, i] {
      auto c = srv->client();
      auto res = c.Post("/v1/chat/completions", image_chat(i % 2 ? grad : solid, 4).dump(),
                        "application/json");
      if (res && res->status == 200) {
        const json j = json::parse(res->body);
        texts[i] = j["choices"][0]["message"]["content"];
        usage[i] = j["usage"];
      } else {
        texts[i] = "HTTP error " + (res ? res->body : std::string("none"));
      }
    });
  for (auto& t : th) t.join();
  EXPECT_EQ(texts[0], texts[2]);
  EXPECT_EQ(texts[1], texts[3]);
  EXPECT_EQ(texts[0].rfind(" nok no", 0), 0u) << texts[0];
  if (draft) {
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(usage[i].contains("speculative")) << usage[i];
      const auto& sp = usage[i]["speculative"];
      EXPECT_GT(sp["drafted"].get<int>(), 0) << sp;
    }
  }
  auto c = srv->client();
  auto res = c.Post("/v1/chat/completions", image_chat(solid, 4).dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json j = json::parse(res->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], texts[0]);
  EXPECT_GE(j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 32);
}

INSTANTIATE_TEST_SUITE_P(Spec, ServerVisionSpec, ::testing::Values("ngram", "draft"));

void expect_400(httplib::Client& c, const json& body, const std::string& needle) {
  auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  EXPECT_NE(res->body.find(needle), std::string::npos) << res->body;
}

TEST(ServerVision, MalformedImagePartsGetA400NamingThePart) {
  SUSTAIN_REQUIRE_REF();
  const std::string dir = tmp_path("vision_image_dir");
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(solid_png(), dir + "/solid.png",
                             std::filesystem::copy_options::overwrite_existing);
  std::string why;
  auto srv = start_vision("--image-dir " + dir, &why);
  ASSERT_TRUE(srv) << why;
  auto c = srv->client();
  const std::string part = "messages[0].content[1]";
  const std::string png = file_bytes(solid_png());
  expect_400(c, image_chat("data:image/png;base64,%%%%"), "'" + part + "': invalid base64");
  expect_400(c, image_chat("data:text/plain,hello"), "must be base64");
  expect_400(c, image_chat("data:image/png;base64," + base64("{\"not\": \"an image\"}")),
             "'" + part + "': not an image");
  expect_400(c, image_chat("data:image/png;base64," + base64(png.substr(0, png.size() / 2))),
             "truncated PNG");
  expect_400(c, image_chat("https://example.invalid/a.png"), "remote image URLs are not fetched");
  expect_400(c, image_chat("file:///etc/passwd"), "outside --image-dir");
  expect_400(c, image_chat("file://" + dir + "/../../x.png"), "outside --image-dir");
  expect_400(c, image_chat("ftp://x/y.png"), "must be a data: URI");
  // A file under --image-dir is read.
  auto ok = c.Post("/v1/chat/completions", image_chat("file://" + dir + "/solid.png").dump(),
                   "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(json::parse(ok->body)["choices"][0]["message"]["content"], " nok no");
  // Too many images for the context (1024 positions, 16 per image, at most
  // 16 parts per request): 16 parts fit, so the limit on parts answers.
  json many = image_chat("data:image/png;base64," + base64(png));
  for (int i = 0; i < 16; ++i)
    many["messages"][0]["content"].push_back(
        {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + base64(png)}}}});
  expect_400(c, many, "at most 16 are allowed");
}

TEST(ServerVision, ImagesNeedAProjectorAndRoomInTheContext) {
  SUSTAIN_REQUIRE_REF();
  std::string why;
  // No --mmproj: an image part is refused, text chat still works.
  auto srv = ServeProcess::start("-c 1024 --chat-template-file " + template_file(), &why,
                                 vision_model());
  ASSERT_TRUE(srv) << why;
  auto c = srv->client();
  const std::string url = "data:image/png;base64," + base64(file_bytes(solid_png()));
  expect_400(c, image_chat(url), "'messages[0].content[1]' is an image, but this server has no vision projector");
  // A context of 64 holds one 16-token image, not four.
  std::string why2;
  auto small = ServeProcess::start("-c 64 --mmproj " + mmproj() + " --chat-template-file " +
                                       template_file(),
                                   &why2, vision_model());
  ASSERT_TRUE(small) << why2;
  auto c2 = small->client();
  json four = image_chat(url);
  for (int i = 0; i < 3; ++i)
    four["messages"][0]["content"].push_back({{"type", "image_url"}, {"image_url", {{"url", url}}}});
  expect_400(c2, four, "4 images take 64 positions, more than the context of 64");
  // A projector whose width is not the model's: the server refuses to start.
  auto r = run_cli("serve -m " + ref_path("models/tiny-llama-f32.gguf") + " --port 0 --mmproj " +
                       mmproj(),
                   "timeout 60 ");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("embeddings of width 128, but the model's width is"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace sustain::test
