#pragma once

#include <string_view>

namespace logdex {

// A key=value tag, as views into bytes someone else owns.
struct TagView {
  std::string_view key;
  std::string_view value;
};

}  // namespace logdex
