// The built-in web UI's files (http/ui/: index.html, app.js, app.css),
// compiled into the binary by http/ui/embed.cmake so that the UI needs no
// files at run time and makes no external request. HttpServer serves them
// at /ui/<name>, and index.html at / too.
#pragma once

#include <span>
#include <string_view>

namespace logdex {

struct UiAsset {
  std::string_view path;          // "/ui/app.js"
  std::string_view content_type;  // "text/javascript; charset=utf-8"
  std::string_view body;
};

std::span<const UiAsset> UiAssets();

}  // namespace logdex
