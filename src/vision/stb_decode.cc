// The one translation unit that compiles stb_image's implementation: see
// stb_decode.h for why it is built here. stb_image's assertions become a C++
// exception caught at the two entry points below, and its allocations go
// through a per-decode arena that frees whatever is left when a decode ends,
// however it ended, and refuses allocations past the caller's budget.
#include "vision/stb_decode.h"

#include <cstdlib>
#include <new>
#include <unordered_map>

namespace sustain::vision::stb {
namespace {

struct CheckFailed {
  const char* expr;
  int line;
};

[[noreturn]] void check_failed(const char* expr, int line) {
  throw CheckFailed{expr, line};
}

struct Arena {
  std::unordered_map<void*, size_t> live;
  uint64_t bytes = 0;
  uint64_t max_bytes = 0;

  ~Arena() {
    for (auto& [p, n] : live) std::free(p);
  }
};
thread_local Arena* g_arena = nullptr;

// Makes `a` the arena of this thread's stb_image calls for one scope.
struct ArenaScope {
  explicit ArenaScope(Arena* a) { g_arena = a; }
  ~ArenaScope() { g_arena = nullptr; }
};

void* arena_malloc(size_t n) {
  Arena* a = g_arena;
  if (a == nullptr || n > a->max_bytes - a->bytes) return nullptr;
  // Zeroed: stb_image reads some of what it allocates before writing it
  // (a JPEG's Huffman tables, where the file never defined one), and
  // what a fresh block held before must not decide what it decodes.
  void* p = std::calloc(n == 0 ? 1 : n, 1);
  if (p == nullptr) return nullptr;
  a->live.emplace(p, n);
  a->bytes += n;
  return p;
}

void arena_free(void* p) {
  if (p == nullptr) return;
  Arena* a = g_arena;
  auto it = a->live.find(p);
  if (it == a->live.end()) check_failed("free of a pointer stb_image did not allocate", __LINE__);
  a->bytes -= it->second;
  a->live.erase(it);
  std::free(p);
}

void* arena_realloc(void* p, size_t n) {
  if (p == nullptr) return arena_malloc(n);
  Arena* a = g_arena;
  auto it = a->live.find(p);
  if (it == a->live.end()) check_failed("realloc of a pointer stb_image did not allocate", __LINE__);
  const size_t old = it->second;
  if (n > old && n - old > a->max_bytes - a->bytes) return nullptr;
  void* q = std::realloc(p, n == 0 ? 1 : n);
  if (q == nullptr) return nullptr;  // p stays valid and tracked
  a->live.erase(it);
  a->live.emplace(q, n);
  a->bytes = a->bytes - old + n;
  return q;
}

}  // namespace
}  // namespace sustain::vision::stb

#define STBI_ASSERT(x) \
  ((x) ? static_cast<void>(0) : ::sustain::vision::stb::check_failed(#x, __LINE__))
#define STBI_MALLOC(sz) ::sustain::vision::stb::arena_malloc(sz)
#define STBI_REALLOC(p, newsz) ::sustain::vision::stb::arena_realloc(p, newsz)
#define STBI_FREE(p) ::sustain::vision::stb::arena_free(p)
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_NO_STDIO
#define STBI_NO_LINEAR
#define STBI_NO_HDR
#include <stb_image.h>

namespace sustain::vision::stb {

bool info(const uint8_t* data, int len, Info* out, std::string* reason) {
  Arena arena;
  arena.max_bytes = 64u << 20;
  ArenaScope scope(&arena);
  try {
    if (stbi_info_from_memory(data, len, &out->width, &out->height, &out->channels) != 0)
      return true;
    *reason = stbi_failure_reason();
  } catch (const CheckFailed& e) {
    *reason = std::string("internal check failed: ") + e.expr;
  } catch (const std::bad_alloc&) {
    *reason = "out of memory";
  }
  return false;
}

bool load_rgb(const uint8_t* data, int len, uint64_t max_bytes, Info* out,
              std::vector<uint8_t>* rgb, std::string* reason) {
  Arena arena;
  arena.max_bytes = max_bytes;
  ArenaScope scope(&arena);
  try {
    unsigned char* px =
        stbi_load_from_memory(data, len, &out->width, &out->height, &out->channels, 3);
    if (px == nullptr) {
      *reason = stbi_failure_reason();
      return false;
    }
    // The arena frees px when it goes.
    rgb->assign(px, px + static_cast<size_t>(out->width) * out->height * 3);
    return true;
  } catch (const CheckFailed& e) {
    *reason = std::string("internal check failed: ") + e.expr;
  } catch (const std::bad_alloc&) {
    *reason = "out of memory";
  }
  return false;
}

}  // namespace sustain::vision::stb
