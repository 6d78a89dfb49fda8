// Whole files read and written, the error naming the path.
#include "optpipe/files.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

namespace optpipe {

Result<std::string> read_text_file(const std::string& path) {
  // POSIX, not std::filesystem: PyPI's LibTorch exports its own copy of std::filesystem, which
  // crashes the runtime built against it.
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return Result<std::string>::Error(Status::IoError("cannot read " + path + ": it is a directory"));
  std::ifstream in(path, std::ios::binary);
  if (!in) return Result<std::string>::Error(Status::IoError("cannot read " + path));
  std::stringstream ss;
  ss << in.rdbuf();
  return Result<std::string>::Of(ss.str());
}

Status write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return Status::IoError("cannot write " + path);
  out << text;
  out.close();
  if (!out) return Status::IoError("error while writing " + path);
  return Status::Ok();
}

}  // namespace optpipe
