// rsp_test.cc: packet framing (gdb/rsp.h): checksums, escapes, packets cut
// anywhere, acks, Ctrl-C, bad and over-long packets, the hex helpers.
// Checksums in the comments are the byte sums of the payload mod 256.
#include "gdb/rsp.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vbts::gdb {
namespace {

using ::testing::ElementsAre;
using ::testing::Optional;

// Events as "kind:payload" strings, for compact expectations.
std::vector<std::string> Describe(const std::vector<RspEvent>& events) {
  std::vector<std::string> out;
  for (const RspEvent& e : events) {
    switch (e.kind) {
      case RspEvent::kPacket: out.push_back("packet:" + e.payload); break;
      case RspEvent::kBadChecksum: out.push_back("bad"); break;
      case RspEvent::kTooLong: out.push_back("long"); break;
      case RspEvent::kInterrupt: out.push_back("int"); break;
      case RspEvent::kAck: out.push_back("+"); break;
      case RspEvent::kNack: out.push_back("-"); break;
    }
  }
  return out;
}

std::vector<std::string> Decode(absl::string_view bytes) {
  PacketDecoder d;
  std::vector<RspEvent> ev;
  d.Feed(bytes, ev);
  return Describe(ev);
}

TEST(EncodePacket, Checksum) {
  // 'O' 0x4f + 'K' 0x4b = 0x9a.
  EXPECT_EQ(EncodePacket("OK"), "$OK#9a");
  // The empty reply: sum 0.
  EXPECT_EQ(EncodePacket(""), "$#00");
  // T05thread:1; sums to 0x4d7 -> d7.
  EXPECT_EQ(EncodePacket("T05thread:1;"), "$T05thread:1;#d7");
}

TEST(EncodePacket, EscapesSpecialBytes) {
  // '#' 0x23 -> '}' 0x03, '$' 0x24 -> '} 0x04', '}' 0x7d -> '} ]', '*' 0x2a -> '} 0x0a'.
  // Transmitted bytes: 7d 03 7d 04 7d 5d 7d 0a, sum 4*0x7d + 0x6e = 0x262
  // -> 62 (the checksum covers the escaped bytes as sent).
  EXPECT_EQ(EncodePacket("#$}*"), std::string("$}\x03}\x04}]}\x0a#62"));
}

TEST(Unescape, UndoesEscapes) {
  EXPECT_THAT(Unescape(std::string("a}\x03}]b")), Optional(std::string("a#}b")));
  EXPECT_THAT(Unescape(""), Optional(std::string()));
  EXPECT_EQ(Unescape("ab}"), std::nullopt);  // dangling escape
}

TEST(Unescape, RoundTripsEveryByte) {
  std::string all;
  for (int i = 0; i < 256; i++) all.push_back(static_cast<char>(i));
  std::string framed = EncodePacket(all);
  // Strip "$" and "#xx"; what is left is the escaped payload.
  EXPECT_THAT(Unescape(absl::string_view(framed).substr(1, framed.size() - 4)), Optional(all));
}

TEST(PacketDecoder, WholePacketsAcksAndInterrupt) {
  // "g" sums to 0x67; "?" to 0x3f.
  EXPECT_THAT(Decode("+$g#67-\x03$?#3f"), ElementsAre("+", "packet:g", "-", "int", "packet:?"));
}

TEST(PacketDecoder, ChecksumEitherCase) {
  // "OK" -> 9a, also accepted as 9A.
  EXPECT_THAT(Decode("$OK#9A$OK#9a"), ElementsAre("packet:OK", "packet:OK"));
}

TEST(PacketDecoder, SplitAtEveryByte) {
  // qSupported: byte sum 0x437 -> 37; m1000,4: 6d 31 30 30 30 2c 34 = 0x18e -> 8e.
  const std::string s = "+$qSupported#37$m1000,4#8e\x03";
  PacketDecoder d;
  std::vector<RspEvent> ev;
  for (char c : s) d.Feed(absl::string_view(&c, 1), ev);
  EXPECT_THAT(Describe(ev), ElementsAre("+", "packet:qSupported", "packet:m1000,4", "int"));
}

TEST(PacketDecoder, BadChecksum) {
  // "g" is 67, not 68.
  EXPECT_THAT(Decode("$g#68$g#67"), ElementsAre("bad", "packet:g"));
  // A non-hex checksum digit ends the packet as bad; the byte is looked at
  // again, so a `$` there starts the next packet.
  EXPECT_THAT(Decode("$g#6$g#67"), ElementsAre("bad", "packet:g"));
  EXPECT_THAT(Decode("$g#zz"), ElementsAre("bad"));
}

TEST(PacketDecoder, ControlCInsidePacketIsData) {
  // 'X' 0x58 + 0x03 = 0x5b: binary data may hold 0x03.
  EXPECT_THAT(Decode(std::string("$X\x03#5b")), ElementsAre(std::string("packet:X\x03")));
}

TEST(PacketDecoder, DollarRestartsPacket) {
  // The lost "$ab" is dropped without an event, "$g#67" decodes.
  EXPECT_THAT(Decode("$ab$g#67"), ElementsAre("packet:g"));
}

TEST(PacketDecoder, NoiseOutsidePacketsIgnored) {
  EXPECT_THAT(Decode("hello#67\r\n$g#67"), ElementsAre("packet:g"));
}

TEST(PacketDecoder, TooLongIsDroppedWithBoundedMemory) {
  // kMaxPacket + 1 'a' bytes: the decoder stops buffering and reports
  // kTooLong whatever the checksum; the next packet decodes.
  std::string s = "$" + std::string(kMaxPacket + 1, 'a') + "#00$g#67";
  EXPECT_THAT(Decode(s), ElementsAre("long", "packet:g"));
  // Exactly kMaxPacket is fine: 0x4000 * 0x61 = 0x184000 -> 00.
  std::string ok = "$" + std::string(kMaxPacket, 'a') + "#00";
  EXPECT_THAT(Decode(ok), ElementsAre("packet:" + std::string(kMaxPacket, 'a')));
  // A never-ending packet fed in pieces never grows past kMaxPacket.
  PacketDecoder d;
  std::vector<RspEvent> ev;
  d.Feed("$", ev);
  for (int i = 0; i < 100; i++) d.Feed(std::string(4096, 'b'), ev);
  d.Feed("#00", ev);
  EXPECT_THAT(Describe(ev), ElementsAre("long"));
}

TEST(Hex, ToAndFrom) {
  EXPECT_EQ(ToHex(std::string("\x00\x7f\xff", 3)), "007fff");
  EXPECT_THAT(FromHex("007FfF"), Optional(std::string("\x00\x7f\xff", 3)));
  EXPECT_THAT(FromHex(""), Optional(std::string()));
  EXPECT_EQ(FromHex("abc"), std::nullopt);  // odd length
  EXPECT_EQ(FromHex("zz"), std::nullopt);
  EXPECT_EQ(FromHex("0x"), std::nullopt);
}

TEST(Hex, ParseHexNumber) {
  EXPECT_THAT(ParseHexNumber("0"), Optional(0u));
  EXPECT_THAT(ParseHexNumber("DeadBeef"), Optional(0xdeadbeefu));
  EXPECT_THAT(ParseHexNumber("ffffffffffffffff"), Optional(~0ull));
  EXPECT_EQ(ParseHexNumber(""), std::nullopt);
  EXPECT_EQ(ParseHexNumber("10000000000000000"), std::nullopt);  // 17 digits
  EXPECT_EQ(ParseHexNumber("-1"), std::nullopt);
  EXPECT_EQ(ParseHexNumber("0x10"), std::nullopt);
  EXPECT_EQ(ParseHexNumber("1 "), std::nullopt);
}

}  // namespace
}  // namespace vbts::gdb
