// Whole files read and written, the error naming the path.
#include "optpipe/files.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace optpipe {

Result<std::string> read_text_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
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
