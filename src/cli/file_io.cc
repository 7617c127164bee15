#include "cli/file_io.h"

#include <fstream>
#include <sstream>

namespace sustain::cli {

Expected<std::string> read_text_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return error(Code::kIo, "cannot read {} '{}'", what, path);
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return error(Code::kIo, "reading {} '{}' failed", what, path);
  return ss.str();
}

Status write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return error(Code::kIo, "cannot write '{}'", path);
  f << text;
  f.close();
  if (!f) return error(Code::kIo, "writing '{}' failed", path);
  return Status::ok();
}

}  // namespace sustain::cli
