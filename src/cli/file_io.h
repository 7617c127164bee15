// Whole-file reads and writes for the commands' inputs (prompt lists,
// case files, templates) and reports, with errors that name the file and
// what it was for.
#pragma once

#include <string>

#include "base/status.h"

namespace sustain::cli {

// The file's bytes; `what` names it in the error ("--cases file").
Expected<std::string> read_text_file(const std::string& path, const char* what);
// Writes (replaces) the file.
Status write_text_file(const std::string& path, const std::string& text);

}  // namespace sustain::cli
