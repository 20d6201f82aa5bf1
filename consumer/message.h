// A Kafka message as the consumer hands it to batch processing: copies of
// the small fields, and the value either owned or borrowed from the client's
// buffer (kept alive by the message), so the hot path does not copy chunks
// and processing does not depend on librdkafka.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace logdex {

// A message value: bytes of its own, or a view of bytes that `owner` keeps
// alive. Reads as a std::string_view either way.
class MessageValue {
 public:
  MessageValue() = default;
  MessageValue(std::string bytes) : owned_(std::move(bytes)) {}  // NOLINT: implicit, as a string
  MessageValue(const char* bytes) : owned_(bytes) {}             // NOLINT: implicit, as a string

  // A view of `bytes`, valid while `owner` lives (the consumer passes the
  // librdkafka message that holds them).
  static MessageValue Borrow(std::shared_ptr<const void> owner, std::string_view bytes) {
    MessageValue v;
    v.owner_ = std::move(owner);
    v.borrowed_ = bytes;
    return v;
  }

  std::string_view view() const { return owner_ ? borrowed_ : std::string_view(owned_); }
  operator std::string_view() const { return view(); }  // NOLINT: implicit by design
  const char* data() const { return view().data(); }
  size_t size() const { return view().size(); }
  bool empty() const { return size() == 0; }
  void assign(const char* bytes, size_t n) {
    owner_.reset();
    borrowed_ = {};
    owned_.assign(bytes, n);
  }

  friend bool operator==(const MessageValue& a, std::string_view b) { return a.view() == b; }
  friend std::ostream& operator<<(std::ostream& out, const MessageValue& v) { return out << v.view(); }

 private:
  std::string owned_;
  std::shared_ptr<const void> owner_;
  std::string_view borrowed_;
};

struct InMessage {
  std::string topic;
  int32_t partition = 0;
  int64_t offset = 0;
  std::string key;
  MessageValue value;
  std::vector<std::pair<std::string, std::string>> headers;
  int64_t timestamp_ms = 0;  // Kafka message timestamp (producer create time)

  // The first header with this name, or nullptr.
  const std::string* Header(std::string_view name) const {
    for (const auto& [k, v] : headers) {
      if (k == name) return &v;
    }
    return nullptr;
  }
};

}  // namespace logdex
