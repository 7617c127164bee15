// The projector types this build implements, one file each (proj_<type>.cc).
// Adding a type: write its file with a make_<type>_head and add one line to
// kHeads in projector.cc.
#pragma once

#include <memory>

#include "vision/projector.h"

namespace sustain::vision {

using MakeHead = Expected<std::unique_ptr<ProjectorHead>> (*)(TensorLoader& ld, const gguf::File& f,
                                                              const VisionHparams& hp);

Expected<std::unique_ptr<ProjectorHead>> make_gemma3_head(TensorLoader& ld, const gguf::File& f,
                                                          const VisionHparams& hp);

}  // namespace sustain::vision
