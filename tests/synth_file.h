// A synthetic GGUF of a preset's shape (tools/synth.h) written once per test
// process under the test tmp folder, for tests that need a real file of a
// real model's size. Tests that include it link sustain_tools.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>

#include "base/thread_pool.h"
#include "test_util.h"
#include "tools/presets.h"
#include "tools/synth.h"

namespace sustain::test {

// The path of `file` (under tmp), synthesized from `preset` in `type` on the
// first call; a failure is reported to the running test.
inline const std::string& synth_file(const std::string& preset, tools::FileType type,
                                     const std::string& file) {
  static std::mutex mu;
  static std::map<std::string, std::string> made;
  std::lock_guard<std::mutex> l(mu);
  auto [it, added] = made.try_emplace(file);
  if (added) {
    it->second = tmp_path(file);
    ThreadPool pool(2);
    tools::SynthOptions opt;
    opt.type = type;
    auto r = tools::synth_model(*tools::find_preset(preset), it->second, opt, pool);
    EXPECT_TRUE(r.has_value()) << r.status().message();
  }
  return it->second;
}

}  // namespace sustain::test
