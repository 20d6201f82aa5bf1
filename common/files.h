// Files written whole: a reader (or a restart after a crash) sees the old
// content or the new one, never a part.
#pragma once

#include <string>

#include "common/result.h"

namespace logdex {

// Writes `data` to `path` atomically and durably: a temporary file beside
// it, fsync, rename over `path`, fsync of the directory.
Status WriteFileAtomically(const std::string& path, const std::string& data);

}  // namespace logdex
