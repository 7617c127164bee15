#include "server/media.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>


namespace sustain::server {

Expected<std::vector<uint8_t>> base64_decode(std::string_view s) {
  static constexpr auto kTable = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(a[i])] = static_cast<int8_t>(i);
    return t;
  }();
  size_t n = s.size();
  while (n > 0 && s[n - 1] == '=' && s.size() - n < 2) --n;
  if (n % 4 == 1)
    return error(Code::kInvalidArgument, "base64 data of {} characters is cut off", s.size());
  std::vector<uint8_t> out;
  out.reserve(n / 4 * 3 + 2);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; ++i) {
    const int8_t v = kTable[static_cast<uint8_t>(s[i])];
    if (v < 0)
      return error(Code::kInvalidArgument, "invalid base64 character {:#04x} at offset {}",
                   static_cast<uint8_t>(s[i]), i);
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>(acc >> bits));
    }
  }
  return out;
}

Expected<std::vector<uint8_t>> image_url_bytes(const std::string& url, const std::string& name,
                                               const std::string& image_dir, size_t max_bytes) {
  auto bad = [&](const std::string& why) { return Status(Code::kInvalidArgument, "'" + name + "': " + why); };
  if (url.rfind("data:", 0) == 0) {
    const size_t comma = url.find(',');
    if (comma == std::string::npos) return bad("the data: URI has no ',' before its data");
    const std::string_view meta(url.data() + 5, comma - 5);
    if (meta.size() < 7 || meta.substr(meta.size() - 7) != ";base64")
      return bad("the data: URI must be base64 (data:image/png;base64,...)");
    const std::string_view data(url.data() + comma + 1, url.size() - comma - 1);
    if (data.size() / 4 * 3 > max_bytes)
      return bad(fmt::format("the image is over the limit of {} bytes", max_bytes));
    auto b = base64_decode(data);
    if (!b) return bad(b.status().message());
    return b;
  }
  if (url.rfind("file://", 0) == 0) {
    if (image_dir.empty())
      return bad("file:// URLs are refused: the server was started without --image-dir");
    std::error_code ec;
    const auto dir = std::filesystem::canonical(image_dir, ec);
    if (ec) return bad(fmt::format("the --image-dir '{}' cannot be read", image_dir));
    const std::filesystem::path path(url.substr(7));
    const auto real = std::filesystem::weakly_canonical(path, ec);
    const auto rel = real.lexically_relative(dir);
    if (ec || !path.is_absolute() || rel.empty() || *rel.begin() == "..")
      return bad("the file is outside --image-dir");
    std::ifstream in(real, std::ios::binary | std::ios::ate);
    if (!in) return bad("the file cannot be opened");
    const auto size = in.tellg();
    if (size < 0 || static_cast<uint64_t>(size) > max_bytes)
      return bad(fmt::format("the image is over the limit of {} bytes", max_bytes));
    in.seekg(0);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  }
  if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0)
    return bad("remote image URLs are not fetched (the server fetches nothing); send the image "
               "as a data: URI");
  return bad("the image URL must be a data: URI (data:image/png;base64,...)");
}

Expected<std::shared_ptr<const engine::MediaPrompt>> image_prompt(const ServerConfig& c,
                                                                  const tokenizer::Tokenizer& tok,
                                                                  const std::string& text,
                                                                  const CompletionRequest& r,
                                                                  int64_t n_embd, int64_t n_ctx) {
  if (!c.images)
    return Status(Code::kInvalidArgument,
                  "'" + r.images[0].name +
                      "' is an image, but this server has no vision projector (start it with "
                      "--mmproj)");
  engine::ImageInput& in = *c.images;
  // Everything that can be refused cheaply is refused before any encoding.
  const int64_t image_tokens = in.tokens_per_image() * static_cast<int64_t>(r.images.size());
  if (image_tokens + 1 > n_ctx)
    return error(Code::kInvalidArgument,
                 "'messages': {} images take {} positions, more than the context of {} tokens",
                 r.images.size(), image_tokens, n_ctx);
  std::vector<std::vector<uint8_t>> bytes;
  for (const auto& part : r.images) {
    SUSTAIN_ASSIGN_OR_RETURN(auto b,
                             image_url_bytes(part.url, part.name, c.image_dir, in.max_file_bytes()));
    bytes.push_back(std::move(b));
  }
  std::vector<std::vector<float>> embd;
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto e = in.encode(bytes[i].data(), bytes[i].size(), "'" + r.images[i].name + "'");
    if (!e) return Status(Code::kInvalidArgument, e.status().message());
    embd.push_back(std::move(*e));
  }
  SUSTAIN_ASSIGN_OR_RETURN(auto mp, engine::build_media_prompt(tok, text, true, true, embd, n_embd,
                                                               in.style()));
  if (mp.size() + 1 > n_ctx)
    return error(Code::kInvalidArgument,
                 "'messages': the prompt is {} positions ({} of them from {} images), but the "
                 "context is {} tokens (room is needed for at least one generated token)",
                 mp.size(), image_tokens, r.images.size(), n_ctx);
  return std::make_shared<const engine::MediaPrompt>(std::move(mp));
}

}  // namespace sustain::server
