// Helpers shared by tests: where the reference data lives, temp paths.
#pragma once

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace sustain::test {

// ../shared/ref beside the checkout, or "" where absent.
inline std::string ref_dir() {
  std::filesystem::path p(SUSTAIN_REF_DIR);
  return std::filesystem::is_directory(p) ? p.string() : std::string();
}

// Skips the calling test (reported as skipped by ctest) when the reference data is absent.
#define SUSTAIN_REQUIRE_REF()                                                   \
  do {                                                                          \
    if (::sustain::test::ref_dir().empty())                                     \
      GTEST_SKIP() << "reference data (" SUSTAIN_REF_DIR ") is absent";         \
  } while (0)

inline std::string ref_path(const std::string& rel) { return ref_dir() + "/" + rel; }

// A fresh path under the test build's tmp/ directory.
inline std::string tmp_path(const std::string& name) {
  std::filesystem::create_directories(SUSTAIN_TEST_TMP);
  return std::string(SUSTAIN_TEST_TMP) + "/" + name;
}

}  // namespace sustain::test
