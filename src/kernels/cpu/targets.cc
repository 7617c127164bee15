// The Highway targets the kernels are compiled for (same definitions as every
// kernels/cpu/*.cc, see CMakeLists.txt), filtered by what this CPU supports.
#include "hwy/targets.h"
#include "hwy/highway.h"
#include "kernels/cpu/kernels.h"

namespace sustain::kernels::cpu {

std::vector<int64_t> compiled_targets() {
  std::vector<int64_t> out;
  const int64_t supported = hwy::SupportedTargets();
  for (int bit = 0; bit < 63; ++bit) {
    const int64_t t = int64_t{1} << bit;
    if ((HWY_TARGETS & t) && (supported & t)) out.push_back(t);
  }
  return out;
}

}  // namespace sustain::kernels::cpu
