// rsp.h: the framing of GDB's remote serial protocol: `$payload#cs`
// packets with their two-hex-digit checksum, `+`/`-` acknowledgements,
// Ctrl-C (0x03) out of band, `}` escapes in binary data (GDB manual,
// "Overview" of the remote protocol).  Pure, fuzzed (fuzz/gdb_packet_fuzz.cc).
#ifndef VBTS_GDB_RSP_H_
#define VBTS_GDB_RSP_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace vbts::gdb {

// Longest packet payload vbts accepts (and advertises as PacketSize).
inline constexpr size_t kMaxPacket = 0x4000;

struct RspEvent {
  enum Kind {
    kPacket,       // a whole packet with a good checksum: `payload` (escapes not undone)
    kBadChecksum,  // a whole packet whose checksum did not match (answer `-`)
    kTooLong,      // a packet longer than kMaxPacket, dropped (answer `-`)
    kInterrupt,    // 0x03 outside a packet
    kAck,          // `+`
    kNack,         // `-`: resend the last reply
  } kind = kPacket;
  std::string payload;
};

// Turns the client's byte stream into events, however it is cut into reads.
// Bytes outside packets other than `+`, `-` and 0x03 are ignored.
class PacketDecoder {
 public:
  void Feed(absl::string_view bytes, std::vector<RspEvent>& out);

 private:
  enum State { kIdle, kBody, kCheck1, kCheck2 } state_ = kIdle;
  std::string body_;
  bool overflow_ = false;
  uint8_t sum_ = 0;
  uint8_t check_ = 0;
};

// `$payload#cs` with `#`, `$`, `}` and `*` escaped.
std::string EncodePacket(absl::string_view payload);
// Undoes `}` escapes (X packet data); nullopt for a dangling `}`.
std::optional<std::string> Unescape(absl::string_view data);

// Hex helpers: lower-case pairs, little-endian where a value is meant.
std::string ToHex(absl::string_view bytes);
std::optional<std::string> FromHex(absl::string_view hex);
// A whole hex number (no sign, no prefix, at most 16 digits).
std::optional<uint64_t> ParseHexNumber(absl::string_view hex);

}  // namespace vbts::gdb

#endif  // VBTS_GDB_RSP_H_
