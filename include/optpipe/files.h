// files.h — whole files read and written: the error (StatusCode::kIoError) names the path.
#pragma once

#include <string>

#include "optpipe/status.h"

namespace optpipe {

Result<std::string> read_text_file(const std::string& path);
Status write_text_file(const std::string& path, const std::string& text);

}  // namespace optpipe
