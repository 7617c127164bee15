// Stop strings over streamed text: the text of a stop string is never sent,
// even when it arrives split over several tokens. Text that could be the
// start of a stop string is held back until the next piece decides it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sustain::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends `text` (complete UTF-8) and returns the part that is now safe to
  // send. After a stop string is found, returns the text before it, and
  // stopped() is true; later calls return "".
  std::string push(std::string_view text);
  // End of generation without a stop: the held-back text is sent after all.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace sustain::server
