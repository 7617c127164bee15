// A read-only memory-mapped file. Weights are views into the mapping, so a
// model larger than RAM still opens and pages in on demand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace sustain {

class MappedFile {
 public:
  static Expected<std::shared_ptr<MappedFile>> open(const std::string& path);
  // Wraps a caller-owned buffer (tests, fuzzing); the buffer must outlive this.
  static std::shared_ptr<MappedFile> from_memory(const void* data, size_t size, std::string name);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool owned_mapping_ = false;
  std::string path_;
};

}  // namespace sustain
