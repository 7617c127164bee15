// libFuzzer target for the tokenizer, over every vocabulary in
// ../shared/ref/vocab (SentencePiece and byte-level BPE with their
// pre-tokenizers). The first byte picks the vocabulary and the flags, the
// rest is the text. Properties:
//  - encode never crashes; it fails only with kInvalidArgument, and only for
//    text that is not well-formed UTF-8; every id is in the vocabulary;
//  - byte-level BPE without special-token parsing gives the text back
//    exactly: the pieces of encode(t) are t (when the vocabulary has a token
//    for each of t's bytes: falcon's lacks a few, dropped as llama.cpp does);
//  - the stream decoder, fed the ids one by one (and also ids read from the
//    input as raw numbers, any in range), emits only well-formed UTF-8, and
//    exactly the pieces' bytes whenever those are well-formed (decode() is
//    called too, but it cleans up spaces for some vocabularies).
// Without ../shared it prints "skipped" and ctest reports the run skipped.
#include <dirent.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

using namespace sustain;
using tokenizer::Tokenizer;

namespace {

void require(bool cond, const char* what, const std::string& detail = {}) {
  if (cond) return;
  std::fprintf(stderr, "fuzz_tokenizer: property violated: %s %s\n", what, detail.c_str());
  std::abort();
}

// Well-formed UTF-8 as RFC 3629 defines it (no overlongs, surrogates or
// code points past U+10FFFF), written here independently of the tokenizer.
bool well_formed(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    size_t len = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto b = static_cast<uint8_t>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

// Bytes as C escapes, for the report of a violation.
std::string shown(std::string_view s) {
  std::string out;
  for (char ch : s.substr(0, 300)) {
    const auto c = static_cast<unsigned char>(ch);
    char b[8];
    std::snprintf(b, sizeof b, c >= 0x20 && c < 0x7f && c != '\\' ? "%c" : "\\x%02x", c);
    out += b;
  }
  return '"' + out + '"';
}

struct Vocab {
  std::string name;
  Tokenizer tok;
  // Bytes the vocabulary can spell (some BPE vocabularies lack a few byte
  // tokens, e.g. falcon's 0x1e, and drop them as llama.cpp does).
  std::vector<bool> byte_ok;
};

std::vector<Vocab>& vocabs() {
  static std::vector<Vocab> v;
  return v;
}

std::string pieces(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) out += tok.token_to_piece(id, false);
  return out;
}

void check_stream(const Tokenizer& tok, const std::vector<int32_t>& ids, const std::string& name) {
  tokenizer::StreamDecoder sd(tok, false);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = sd.push(id);
    require(well_formed(piece), "the stream decoder emitted ill-formed UTF-8", name);
    streamed += piece;
  }
  streamed += sd.flush();
  require(well_formed(streamed), "the stream decoder's end is ill-formed UTF-8", name);
  (void)tok.decode(ids, false);
  // decode() cleans up spaces for some vocabularies (falcon: " ," → ",") and
  // drops SentencePiece's prefix space; a stream is the pieces as they are.
  const std::string whole = pieces(tok, ids);
  if (well_formed(whole))
    require(streamed == whole, "streamed text differs from the pieces",
            name + ": streamed " + shown(streamed) + ", pieces " + shown(whole));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = SUSTAIN_VOCAB_DIR;
  std::vector<std::string> files;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".gguf") == 0) files.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(files.begin(), files.end());
  for (const auto& n : files) {
    auto f = gguf::File::open(dir + "/" + n);
    if (!f) continue;
    auto t = Tokenizer::from_gguf(*f);
    if (!t) {
      std::fprintf(stderr, "fuzz_tokenizer: %s not loaded: %s\n", n.c_str(),
                   t.status().message().c_str());
      continue;
    }
    std::vector<bool> byte_ok(256);
    for (int b = 0; b < 256; ++b) {
      const char c = static_cast<char>(b);
      auto ids = t->encode(std::string_view(&c, 1), false, false);
      byte_ok[b] = ids && pieces(*t, *ids) == std::string(1, c);
    }
    vocabs().push_back(Vocab{n, std::move(*t), std::move(byte_ok)});
  }
  if (vocabs().empty()) {
    std::printf("fuzz_tokenizer: skipped: no vocabulary in %s\n", dir.c_str());
    std::exit(0);
  }
  std::fprintf(stderr, "fuzz_tokenizer: %zu vocabularies\n", vocabs().size());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Vocab& v = vocabs()[(data[0] >> 2) % vocabs().size()];
  const Tokenizer& tok = v.tok;
  const bool add_special = data[0] & 1, parse_special = data[0] & 2;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  auto ids = tok.encode(text, add_special, parse_special);
  if (!ids) {
    require(ids.status().code() == Code::kInvalidArgument, "encode failed with another code",
            v.name + ": " + ids.status().message());
    require(!well_formed(text), "encode refused well-formed UTF-8",
            v.name + ": " + ids.status().message());
  } else {
    for (int32_t id : *ids) require(id >= 0 && id < tok.n_vocab(), "an id outside the vocabulary");
    bool spelled = true;
    for (char c : text) spelled = spelled && v.byte_ok[static_cast<unsigned char>(c)];
    if (tok.model() == "gpt2" && !add_special && !parse_special && spelled)
      require(pieces(tok, *ids) == text, "byte-level BPE did not round-trip",
              v.name + ": " + shown(text) + " came back as " + shown(pieces(tok, *ids)));
    check_stream(tok, *ids, v.name);
  }

  // The same bytes as token ids (two bytes each), as a model might emit them.
  std::vector<int32_t> raw;
  for (size_t i = 1; i + 1 < size; i += 2)
    raw.push_back(static_cast<int32_t>((data[i] << 8 | data[i + 1]) % tok.n_vocab()));
  check_stream(tok, raw, v.name);
  for (int32_t id : raw) (void)tok.token_to_piece(id, true);
  return 0;
}
