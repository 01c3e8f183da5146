// rsp.cc: packet framing of GDB's remote serial protocol (gdb/rsp.h).
// GDB manual, "Overview" of Remote Protocol: `$packet-data#checksum`, the
// checksum being the sum of the transmitted data bytes modulo 256 as two hex
// digits; `}` escapes the byte that follows (XOR 0x20); `*` starts a
// run-length encoding, so a stub escapes it too when it appears in data.
#include "gdb/rsp.h"

namespace vbts::gdb {
namespace {

// Value of one hex digit (either case), or -1.
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

constexpr char kHexDigits[] = "0123456789abcdef";

bool NeedsEscape(char c) { return c == '#' || c == '$' || c == '}' || c == '*'; }

}  // namespace

void PacketDecoder::Feed(absl::string_view bytes, std::vector<RspEvent>& out) {
  for (size_t i = 0; i < bytes.size(); i++) {
    const char c = bytes[i];
    switch (state_) {
      case kIdle:
        // Between packets only acks and Ctrl-C mean something; anything else
        // is line noise (or the tail of a packet we lost the start of).
        if (c == '$') {
          state_ = kBody;
          body_.clear();
          overflow_ = false;
          sum_ = 0;
        } else if (c == '+') {
          out.push_back({RspEvent::kAck, {}});
        } else if (c == '-') {
          out.push_back({RspEvent::kNack, {}});
        } else if (c == 0x03) {
          out.push_back({RspEvent::kInterrupt, {}});
        }
        break;
      case kBody:
        if (c == '#') {
          state_ = kCheck1;
        } else if (c == '$') {
          // A raw `$` never occurs inside a packet (it is escaped): the
          // client gave up on the previous packet, so resynchronise on this
          // one.  The lost packet is not answered; the client resends it.
          body_.clear();
          overflow_ = false;
          sum_ = 0;
        } else {
          sum_ = static_cast<uint8_t>(sum_ + static_cast<uint8_t>(c));
          // Keep counting the checksum but stop buffering: memory stays
          // bounded by kMaxPacket whatever the client sends.
          if (body_.size() < kMaxPacket)
            body_.push_back(c);
          else
            overflow_ = true;
        }
        break;
      case kCheck1:
      case kCheck2: {
        const int v = HexValue(c);
        if (v < 0) {
          // A malformed checksum: reject the packet and look at this byte
          // again as the start of whatever follows (it may be a `$`).
          out.push_back({overflow_ ? RspEvent::kTooLong : RspEvent::kBadChecksum, {}});
          state_ = kIdle;
          body_.clear();
          i--;
          break;
        }
        if (state_ == kCheck1) {
          check_ = static_cast<uint8_t>(v << 4);
          state_ = kCheck2;
          break;
        }
        check_ = static_cast<uint8_t>(check_ | v);
        state_ = kIdle;
        if (overflow_)
          out.push_back({RspEvent::kTooLong, {}});
        else if (check_ != sum_)
          out.push_back({RspEvent::kBadChecksum, {}});
        else
          out.push_back({RspEvent::kPacket, std::move(body_)});
        body_.clear();
        break;
      }
    }
  }
}

std::string EncodePacket(absl::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 4);
  out.push_back('$');
  uint8_t sum = 0;
  auto put = [&](char c) {
    out.push_back(c);
    sum = static_cast<uint8_t>(sum + static_cast<uint8_t>(c));
  };
  for (char c : payload) {
    if (NeedsEscape(c)) {
      put('}');
      put(static_cast<char>(c ^ 0x20));
    } else {
      put(c);
    }
  }
  out.push_back('#');
  out.push_back(kHexDigits[sum >> 4]);
  out.push_back(kHexDigits[sum & 15]);
  return out;
}

std::optional<std::string> Unescape(absl::string_view data) {
  std::string out;
  out.reserve(data.size());
  for (size_t i = 0; i < data.size(); i++) {
    if (data[i] != '}') {
      out.push_back(data[i]);
      continue;
    }
    if (++i == data.size()) return std::nullopt;
    out.push_back(static_cast<char>(data[i] ^ 0x20));
  }
  return out;
}

std::string ToHex(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) {
    const uint8_t b = static_cast<uint8_t>(c);
    out.push_back(kHexDigits[b >> 4]);
    out.push_back(kHexDigits[b & 15]);
  }
  return out;
}

std::optional<std::string> FromHex(absl::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = HexValue(hex[i]), lo = HexValue(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi << 4 | lo));
  }
  return out;
}

std::optional<uint64_t> ParseHexNumber(absl::string_view hex) {
  if (hex.empty() || hex.size() > 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : hex) {
    const int d = HexValue(c);
    if (d < 0) return std::nullopt;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace vbts::gdb
