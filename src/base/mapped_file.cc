#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sustain {

Expected<std::shared_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return error(Code::kIo, "cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return error(Code::kIo, "cannot stat '{}': {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return error(Code::kIo, "'{}' is not a regular file", path);
  }
  auto f = std::shared_ptr<MappedFile>(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return error(Code::kIo, "cannot mmap '{}': {}", path, std::strerror(e));
    }
    f->data_ = static_cast<const uint8_t*>(p);
    f->owned_mapping_ = true;
  }
  ::close(fd);
  return f;
}

std::shared_ptr<MappedFile> MappedFile::from_memory(const void* data, size_t size, std::string name) {
  auto f = std::shared_ptr<MappedFile>(new MappedFile());
  f->data_ = static_cast<const uint8_t*>(data);
  f->size_ = size;
  f->path_ = std::move(name);
  return f;
}

MappedFile::~MappedFile() {
  if (owned_mapping_ && data_) munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace sustain
