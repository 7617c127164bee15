// Helpers for the vision tests: reading reference dumps, comparing arrays in
// units of the reference's standard deviation (the README's metric), and
// encoding test images with stb_image_write.
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "test_util.h"

namespace sustain::test {

inline std::string vision_ref(const std::string& rel) {
  return ref_path("vision/" + rel);
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
}

inline std::vector<float> read_f32(const std::string& path) {
  const auto b = read_bytes(path);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

struct Diff {
  double max_abs = 0, max_over_std = 0, rms_over_std = 0, ref_std = 0;
};

inline Diff compare(const std::vector<float>& got, const std::vector<float>& ref) {
  Diff d;
  if (got.size() != ref.size() || ref.empty()) {
    d.max_abs = d.max_over_std = d.rms_over_std = INFINITY;
    return d;
  }
  double mean = 0;
  for (float r : ref) mean += r;
  mean /= static_cast<double>(ref.size());
  double var = 0, sq = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    var += (ref[i] - mean) * (ref[i] - mean);
    const double e = static_cast<double>(got[i]) - ref[i];
    sq += e * e;
    d.max_abs = std::max(d.max_abs, std::fabs(e));
  }
  d.ref_std = std::sqrt(var / static_cast<double>(ref.size()));
  d.max_over_std = d.max_abs / d.ref_std;
  d.rms_over_std = std::sqrt(sq / static_cast<double>(ref.size())) / d.ref_std;
  return d;
}

}  // namespace sustain::test
