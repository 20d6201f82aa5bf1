// base64url (RFC 4648 section 5) without padding: for opaque tokens that
// travel in URLs (query cursors and their signatures). Written here because
// it is a dozen lines and no Debian library the project already links offers
// the URL alphabet without padding. Pure functions, thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace logdex {

std::string EncodeBase64Url(std::string_view bytes);

// nullopt when `text` holds a character outside the alphabet.
std::optional<std::string> DecodeBase64Url(std::string_view text);

}  // namespace logdex
