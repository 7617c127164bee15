#include "eval/baseline.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

namespace sustain::eval {
namespace {

constexpr char kMagic[8] = {'S', 'K', 'L', 'B', 'A', 'S', 'E', '2'};

template <class T>
void put(std::string& out, const T& x) {
  out.append(reinterpret_cast<const char*>(&x), sizeof(T));
}

struct Reader {
  const std::string& d;
  size_t o = 0;
  const std::string& path;
  template <class T>
  Status get(T* x, size_t n, const char* what) {
    const size_t bytes = sizeof(T) * n;
    if (n > (d.size() - o) / sizeof(T))
      return error(Code::kBadFile, "{}: truncated at byte {} reading {} ({} bytes needed, {} left)",
                   path, o, what, bytes, d.size() - o);
    std::memcpy(x, d.data() + o, bytes);
    o += bytes;
    return Status::ok();
  }
};

}  // namespace

Status write_baseline(const std::string& path, const SavedBaseline& b) {
  if (b.rows.size() != b.tokens.size() || b.next_logit.size() != b.tokens.size())
    return error(Code::kInternal, "baseline: {} tokens but {} rows and {} next logits",
                 b.tokens.size(), b.rows.size(), b.next_logit.size());
  nlohmann::ordered_json h;
  h["model"] = b.model;
  h["cache_type_k"] = b.cache_k;
  h["cache_type_v"] = b.cache_v;
  h["source"] = b.source;
  h["n_vocab"] = b.n_vocab;
  h["n_tokens"] = b.tokens.size();
  h["top_k"] = b.top_k;
  const std::string hs = h.dump();
  std::string out(kMagic, sizeof(kMagic));
  put(out, static_cast<uint32_t>(hs.size()));
  out += hs;
  for (int32_t t : b.tokens) put(out, t);
  for (size_t i = 0; i < b.rows.size(); ++i) {
    const SavedRow& r = b.rows[i];
    if (r.ids.size() != static_cast<size_t>(b.top_k) || r.logits.size() != r.ids.size())
      return error(Code::kInternal, "baseline: row {} has {} ids, expected {}", i, r.ids.size(),
                   b.top_k);
    put(out, r.lse);
    put(out, b.next_logit[i]);
    out.append(reinterpret_cast<const char*>(r.ids.data()), r.ids.size() * sizeof(int32_t));
    out.append(reinterpret_cast<const char*>(r.logits.data()), r.logits.size() * sizeof(float));
  }
  std::ofstream f(path, std::ios::binary);
  if (!f) return error(Code::kIo, "cannot write baseline '{}'", path);
  f.write(out.data(), static_cast<std::streamsize>(out.size()));
  if (!f) return error(Code::kIo, "writing baseline '{}' failed", path);
  return Status::ok();
}

Expected<SavedBaseline> read_baseline(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return error(Code::kIo, "cannot read baseline '{}'", path);
  const std::string d((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (d.size() < sizeof(kMagic) + 4 || std::memcmp(d.data(), kMagic, sizeof(kMagic)) != 0)
    return error(Code::kBadFile, "{}: not a sustain KL baseline (no SKLBASE2 magic)", path);
  Reader r{d, sizeof(kMagic), path};
  uint32_t hlen = 0;
  SUSTAIN_TRY(r.get(&hlen, 1, "the header length"));
  std::string hs(hlen, '\0');
  SUSTAIN_TRY(r.get(hs.data(), hlen, "the header"));
  SavedBaseline b;
  int64_t n_tokens = 0;
  try {
    const auto h = nlohmann::json::parse(hs);
    b.model = h.at("model").get<std::string>();
    b.cache_k = h.at("cache_type_k").get<std::string>();
    b.cache_v = h.at("cache_type_v").get<std::string>();
    b.source = h.at("source").get<std::string>();
    b.n_vocab = h.at("n_vocab").get<int64_t>();
    n_tokens = h.at("n_tokens").get<int64_t>();
    b.top_k = h.at("top_k").get<int>();
  } catch (const std::exception& e) {
    return error(Code::kBadFile, "{}: bad header: {}", path, e.what());
  }
  if (b.n_vocab < 1 || b.n_vocab > (int64_t{1} << 24) || b.top_k < 1 || b.top_k > b.n_vocab ||
      n_tokens < 1)
    return error(Code::kBadFile, "{}: header has n_vocab {}, top_k {}, n_tokens {}", path,
                 b.n_vocab, b.top_k, n_tokens);
  const uint64_t row_bytes = 12 + 8 * static_cast<uint64_t>(b.top_k);
  if (static_cast<uint64_t>(n_tokens) > (d.size() - r.o) / (4 + row_bytes))
    return error(Code::kBadFile, "{}: {} tokens of {} bytes each do not fit the {} bytes left", path,
                 n_tokens, 4 + row_bytes, d.size() - r.o);
  b.tokens.resize(static_cast<size_t>(n_tokens));
  SUSTAIN_TRY(r.get(b.tokens.data(), b.tokens.size(), "token ids"));
  b.rows.resize(b.tokens.size());
  b.next_logit.resize(b.tokens.size());
  for (size_t i = 0; i < b.rows.size(); ++i) {
    SavedRow& row = b.rows[i];
    SUSTAIN_TRY(r.get(&row.lse, 1, "a row"));
    SUSTAIN_TRY(r.get(&b.next_logit[i], 1, "a row"));
    row.ids.resize(static_cast<size_t>(b.top_k));
    row.logits.resize(static_cast<size_t>(b.top_k));
    SUSTAIN_TRY(r.get(row.ids.data(), row.ids.size(), "a row's ids"));
    SUSTAIN_TRY(r.get(row.logits.data(), row.logits.size(), "a row's logits"));
    for (int32_t id : row.ids)
      if (id < 0 || id >= b.n_vocab)
        return error(Code::kBadFile, "{}: row {} holds token id {} outside [0, {})", path, i, id,
                     b.n_vocab);
  }
  for (size_t i = 0; i < b.tokens.size(); ++i)
    if (b.tokens[i] < 0 || b.tokens[i] >= b.n_vocab)
      return error(Code::kBadFile, "{}: token {} is id {}, outside [0, {})", path, i, b.tokens[i],
                   b.n_vocab);
  if (r.o != d.size())
    return error(Code::kBadFile, "{}: {} bytes after the last row", path, d.size() - r.o);
  return b;
}

}  // namespace sustain::eval
