// stub_test.cc: the GDB protocol state machine (gdb/stub.h) against a fake
// target: a GDB-like session, every packet kind, and bad clients (malformed
// packets, bad checksums, huge lengths, unmapped memory, bytes one by one).
// Literal replies carry their checksum (byte sum of the payload mod 256,
// derived in the comment); others are built with EncodePacket, which
// rsp_test.cc checks.
#include "gdb/stub.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_format.h"
#include "gdb/testing/fake_target.h"

namespace vbts::gdb {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using vbts::gdb::testing::FakeTarget;

// What the stub answers to a good packet in ack mode: `+`, then the reply.
std::string Acked(absl::string_view reply) { return "+" + EncodePacket(reply); }

class StubTest : public ::testing::Test {
 protected:
  // The client's packet, framed (escaped like GDB does for X data).
  std::string Send(absl::string_view payload) { return stub.Receive(EncodePacket(payload)); }
  // Sends, then returns the reply payload (no `+`, no framing); "" if none.
  std::string Ask(absl::string_view payload) {
    std::string out = Send(payload);
    if (!out.empty() && out[0] == '+') out.erase(0, 1);
    if (out.size() < 4 || out[0] != '$') return "<none:" + out + ">";
    std::optional<std::string> body = Unescape(out.substr(1, out.size() - 4));
    return body ? *body : "<bad escape>";
  }
  void Resume(absl::string_view packet) {
    EXPECT_EQ(Send(packet), "+");  // acked, answered only at the stop
    EXPECT_TRUE(stub.running());
  }

  FakeTarget target;
  Stub stub{target, StubOptions{}};
};

TEST_F(StubTest, Handshake) {
  // GDB 13's qSupported; the reply's byte sum is 0x3122 -> 22.
  EXPECT_EQ(Send("qSupported:multiprocess+;swbreak+;hwbreak+;qRelocInsn+;fork-events+;vfork-events+;"
                 "exec-events+;vContSupported+;QThreadEvents+;no-resumed+;memory-tagging+;xmlRegisters=i386"),
            "+$PacketSize=4000;qXfer:features:read+;QStartNoAckMode+;swbreak+;hwbreak+;vContSupported+;"
            "Qbtrace:bts+;Qbtrace:off+;Qbtrace-conf:bts:size+;qXfer:btrace:read+;qXfer:btrace-conf:read+#22");
  // "OK": 0x4f + 0x4b = 0x9a.
  EXPECT_EQ(Send("QStartNoAckMode"), "+$OK#9a");
  // From now on no `+`.  "T05thread:1;" sums to 0x4d7 -> d7.
  EXPECT_EQ(Send("?"), "$T05thread:1;#d7");
  EXPECT_EQ(stub.Receive("+"), "");
  // Nothing is resent on `-` either (no-ack mode has no retransmissions).
  EXPECT_EQ(stub.Receive("-"), "");
  // A bad checksum is dropped silently.
  EXPECT_EQ(stub.Receive("$g#00"), "");
}

TEST_F(StubTest, SimpleQueries) {
  EXPECT_EQ(Ask("?"), "T05thread:1;");  // the attach stop
  EXPECT_EQ(Ask("qAttached"), "1");
  EXPECT_EQ(Ask("qAttached:1"), "1");
  EXPECT_EQ(Send("qC"), "+$QC1#c5");  // 0x51 + 0x43 + 0x31 = 0xc5
  EXPECT_EQ(Ask("qfThreadInfo"), "m1");
  EXPECT_EQ(Ask("qsThreadInfo"), "l");
  EXPECT_EQ(Ask("Hg0"), "OK");
  EXPECT_EQ(Ask("Hc-1"), "OK");
  EXPECT_EQ(Ask("Hgp1.1"), "OK");
  EXPECT_EQ(Ask("T1"), "OK");
  EXPECT_EQ(Ask("qSymbol::"), "OK");
  // Unsupported: the empty reply "$#00" (sum 0).
  EXPECT_EQ(Send("qOffsets"), "+$#00");
  EXPECT_EQ(Ask("qTStatus"), "");
  EXPECT_EQ(Ask("vMustReplyEmpty"), "");
  EXPECT_EQ(Ask("vFile:open:"), "");
  EXPECT_EQ(Ask("!"), "");
  EXPECT_EQ(Ask("Qnonsense"), "");
  EXPECT_EQ(Ask("jabberwocky"), "");
  EXPECT_EQ(Ask(""), "");  // an empty packet
  EXPECT_EQ(Ask("vCont?"), "vCont;c;C;s;S;r");
}

TEST_F(StubTest, Registers) {
  target.regs.st.rip = 0x1234;
  target.regs.st.gpr[vcpu::kRbx] = 0xb;
  const std::string g = Ask("g");
  EXPECT_EQ(g, EncodeRegisters(Arch::kX86_64, target.regs));
  EXPECT_EQ(g.size(), 2u * 608);
  // p10 = register 16 = rip.
  EXPECT_EQ(Ask("p10"), "3412000000000000");
  EXPECT_EQ(Ask("p1"), "0b00000000000000");  // rbx
  EXPECT_EQ(Ask("p42"), "E01");                // 66 registers: 0x42 is one too far
  EXPECT_EQ(Ask("pzz"), "E01");
  EXPECT_EQ(Ask("p"), "E01");
  // P10=... writes rip.
  EXPECT_EQ(Ask("P10=0010000000000000"), "OK");
  EXPECT_EQ(target.regs.st.rip, 0x1000u);
  EXPECT_EQ(Ask("P10=0010"), "E01");  // too short for rip
  EXPECT_EQ(Ask("P10"), "E01");
  EXPECT_EQ(Ask("P42=00000000"), "E01");
  // G: the whole block back with rax changed.
  std::string block = EncodeRegisters(Arch::kX86_64, target.regs);
  block.replace(0, 16, "8877665544332211");
  EXPECT_EQ(Ask("G" + block), "OK");
  EXPECT_EQ(target.regs.st.gpr[vcpu::kRax], 0x1122334455667788u);
  EXPECT_EQ(Ask("G" + block.substr(2)), "E01");  // wrong length
  EXPECT_EQ(Ask("Gxyz"), "E01");
  // The target refusing (a selector it cannot load) is an error too.
  target.write_status = absl::InvalidArgumentError("bad selector");
  EXPECT_EQ(Ask("G" + block), "E01");
  EXPECT_EQ(Ask("P10=0020000000000000"), "E01");
  EXPECT_EQ(target.regs.st.rip, 0x1000u);
}

TEST_F(StubTest, I386Registers) {
  Stub s32(target, StubOptions{Arch::kI386});
  target.regs.st.rip = 0x100010;
  // p8 = eip: the low 32 bits, "10001000": 2 * 0x31 + 6 * 0x30 = 0x182 -> 82.
  EXPECT_EQ(s32.Receive(EncodePacket("p8")), "+$10001000#82");
  EXPECT_EQ(s32.Receive(EncodePacket("g")).size(), 1 + 1 + 2 * 336 + 3);
  // c with an address sets EIP (zero-extended).
  EXPECT_EQ(s32.Receive(EncodePacket("c200000")), "+");
  EXPECT_EQ(target.regs.st.rip, 0x200000u);
}

TEST_F(StubTest, MemoryRead) {
  for (int i = 0; i < 4; i++) target.ram[i] = static_cast<uint8_t>(i);
  // "00010203" sums to 0x186 -> 86.
  EXPECT_EQ(Send("m1000,4"), "+$00010203#86");
  EXPECT_EQ(Ask("M1000,0:"), "OK");
  // Unmapped: the fake target transfers 0 bytes -> EFAULT.  "E14": 0x45 +
  // 0x31 + 0x34 = 0xaa.
  EXPECT_EQ(Send("m0,4"), "+$E14#aa");
  EXPECT_EQ(Ask("mffffffffffffffff,10"), "E14");
  // Short read at the end of RAM (0x1000 + 0x10000): the 2 bytes there.
  EXPECT_EQ(Ask("m10ffe,8"), "0000");
  // Zero length: zero bytes.
  EXPECT_EQ(Ask("m1000,0"), "");
  // Huge lengths are cut to kMaxPacket/2 bytes.
  EXPECT_EQ(Ask("m1000,ffffffffffffffff").size(), kMaxPacket);
  EXPECT_EQ(Ask("m1000,100000").size(), kMaxPacket);
  // Malformed.
  for (const char* p : {"m", "m1000", "m1000,", "m,4", "mzz,4", "m1000;4", "m1000,4,5", "m10000000000000000,1"})
    EXPECT_EQ(Ask(p), "E01") << p;
}

TEST_F(StubTest, MemoryWrite) {
  EXPECT_EQ(Ask("M1000,2:abcd"), "OK");
  EXPECT_EQ(target.ram[0], 0xab);
  EXPECT_EQ(target.ram[1], 0xcd);
  EXPECT_EQ(Ask("M1000,3:abcd"), "E01");   // length does not match the data
  EXPECT_EQ(Ask("M1000,2:abc"), "E01");    // odd hex
  EXPECT_EQ(Ask("M1000,2:zzzz"), "E01");
  EXPECT_EQ(Ask("M1000,2abcd"), "E01");    // no colon
  EXPECT_EQ(Ask("M0,2:abcd"), "E14");      // unmapped
  EXPECT_EQ(Ask("M10fff,2:abcd"), "E14");  // only one byte fits: a short write
  EXPECT_EQ(target.ram[0xffff], 0xab);
  EXPECT_EQ(Ask("Mffffffffffffffff,ffffffffffffffff:00"), "E01");  // huge length: no allocation
}

TEST_F(StubTest, BinaryWrite) {
  // GDB probes X support with an empty write.
  EXPECT_EQ(Ask("X1000,0:"), "OK");
  // Data "#}*\x03" travels escaped (EncodePacket does what GDB does); the
  // stub unescapes it and checks the length.
  EXPECT_EQ(Ask(std::string("X1000,4:#}*\x03")), "OK");
  EXPECT_EQ(target.ram[0], '#');
  EXPECT_EQ(target.ram[1], '}');
  EXPECT_EQ(target.ram[2], '*');
  EXPECT_EQ(target.ram[3], 0x03);
  // A raw escaped payload with a dangling `}`: "X1000,1:}" framed by hand.
  // Bytes X 1 0 0 0 , 1 : } = 0x58+0x31+0x90+0x2c+0x31+0x3a+0x7d = 0x22d -> 2d.
  EXPECT_EQ(stub.Receive("$X1000,1:}#2d"), Acked("E01"));
  EXPECT_EQ(Ask("X1000,5:ab"), "E01");
  EXPECT_EQ(Ask("X1000,ffffffffffffffff:ab"), "E01");
  EXPECT_EQ(Ask("X0,2:ab"), "E14");
  EXPECT_EQ(Ask("X1000:ab"), "E01");
}

TEST_F(StubTest, ContinueAndStep) {
  Resume("c");
  EXPECT_THAT(stub.TakeResume(), ::testing::Optional(::testing::Field(&gdb::Resume::kind, gdb::Resume::kContinue)));
  EXPECT_EQ(stub.TakeResume(), std::nullopt);  // once
  // A step completed: "T05thread:1;" -> d7.
  EXPECT_EQ(stub.Stopped(Stop{Stop::kStep}), "$T05thread:1;#d7");
  EXPECT_FALSE(stub.running());
  EXPECT_EQ(Ask("?"), "T05thread:1;");

  Resume("s");
  EXPECT_EQ(stub.TakeResume()->kind, gdb::Resume::kStep);
  stub.Stopped(Stop{Stop::kStep});

  // An address argument sets RIP first.
  Resume("c1234");
  EXPECT_EQ(target.regs.st.rip, 0x1234u);
  stub.Stopped(Stop{Stop::kStep});
  // Signals are ignored; the address after `;` still applies.
  Resume("C0b;5678");
  EXPECT_EQ(target.regs.st.rip, 0x5678u);
  EXPECT_EQ(stub.TakeResume()->kind, gdb::Resume::kContinue);
  stub.Stopped(Stop{Stop::kStep});
  Resume("S05");
  EXPECT_EQ(stub.TakeResume()->kind, gdb::Resume::kStep);
  stub.Stopped(Stop{Stop::kStep});

  EXPECT_EQ(Ask("czz"), "E01");
  EXPECT_EQ(Ask("C"), "E01");
  EXPECT_EQ(Ask("C05;"), "E01");
  EXPECT_EQ(Ask("Szz"), "E01");
  EXPECT_FALSE(stub.running());
  // The target refusing the new RIP: no resume.
  target.write_status = absl::InvalidArgumentError("no");
  EXPECT_EQ(Ask("c1000"), "E01");
  EXPECT_FALSE(stub.running());
}

TEST_F(StubTest, VCont) {
  struct Case {
    const char* packet;
    gdb::Resume::Kind kind;
    uint64_t start = 0, end = 0;
  } cases[] = {
      {"vCont;c", gdb::Resume::kContinue},
      {"vCont;s:1;c", gdb::Resume::kStep},       // GDB's step of thread 1, others continue
      {"vCont;s:2;c", gdb::Resume::kContinue},   // the step is for another thread
      {"vCont;C05", gdb::Resume::kContinue},
      {"vCont;S05:1", gdb::Resume::kStep},
      {"vCont;c:p1.-1", gdb::Resume::kContinue},
      {"vCont;s:p1.1;c", gdb::Resume::kStep},
      {"vCont;s:-1", gdb::Resume::kStep},
      {"vCont;r1000,1010:1;c", gdb::Resume::kRange, 0x1000, 0x1010},
  };
  for (const Case& c : cases) {
    Resume(c.packet);
    std::optional<gdb::Resume> r = stub.TakeResume();
    ASSERT_TRUE(r) << c.packet;
    EXPECT_EQ(r->kind, c.kind) << c.packet;
    EXPECT_EQ(r->start, c.start) << c.packet;
    EXPECT_EQ(r->end, c.end) << c.packet;
    stub.Stopped(Stop{Stop::kStep});
  }
  for (const char* bad : {"vCont;", "vCont;t", "vCont;x", "vCont;s:2", "vCont;rzz", "vCont;r10,1", "vCont;r1000",
                          "vCont;Czz", "vCont;c:", "vCont;s:zz;c", "vCont;;"}) {
    EXPECT_EQ(Ask(bad), "E01") << bad;
    EXPECT_FALSE(stub.running()) << bad;
  }
}

TEST_F(StubTest, InterruptAndStopReplies) {
  // At attach the machine reports kInterrupted: nobody asked, nothing is
  // sent, and `?` answers T05 (GDB shows no SIGINT for attaching).
  EXPECT_EQ(stub.Stopped(Stop{Stop::kInterrupted}), "");
  EXPECT_EQ(Ask("?"), "T05thread:1;");
  // A Ctrl-C while stopped is a late one: ignored.
  EXPECT_EQ(stub.Receive("\x03"), "");
  EXPECT_FALSE(stub.interrupt_requested());

  Resume("c");
  EXPECT_EQ(stub.Receive("\x03"), "");
  EXPECT_TRUE(stub.interrupt_requested());
  // "T02thread:1;" sums to 0x4d4 -> d4.
  EXPECT_EQ(stub.Stopped(Stop{Stop::kInterrupted}), "$T02thread:1;#d4");
  EXPECT_FALSE(stub.interrupt_requested());
  EXPECT_EQ(Ask("?"), "T02thread:1;");

  // swbreak/hwbreak only once the client said it knows them.
  Stop bp{Stop::kBreakpoint};
  Resume("c");
  EXPECT_EQ(stub.Stopped(bp), EncodePacket("T05thread:1;"));
  EXPECT_EQ(Ask("qSupported:swbreak+;hwbreak+"), Ask("qSupported"));
  Ask("qSupported:swbreak+;hwbreak+");
  Resume("c");
  // "T05swbreak:;thread:1;" sums to 0x73b -> 3b.
  EXPECT_EQ(stub.Stopped(bp), "$T05swbreak:;thread:1;#3b");
  bp.point = PointType::kHardware;
  Resume("c");
  EXPECT_EQ(stub.Stopped(bp), EncodePacket("T05hwbreak:;thread:1;"));

  Stop wp{Stop::kWatchpoint, PointType::kWrite, 0x2000};
  Resume("c");
  // "T05watch:2000;thread:1;" sums to 0x825 -> 25.
  EXPECT_EQ(stub.Stopped(wp), "$T05watch:2000;thread:1;#25");
  wp.point = PointType::kRead;
  Resume("c");
  EXPECT_EQ(stub.Stopped(wp), EncodePacket("T05rwatch:2000;thread:1;"));
  wp.point = PointType::kAccess;
  wp.address = 0xffffffff80001000ull;
  Resume("c");
  EXPECT_EQ(stub.Stopped(wp), EncodePacket("T05awatch:ffffffff80001000;thread:1;"));

  Resume("c");
  // kTerminated with SIGSEGV (11): "X0b" sums to 0x58+0x30+0x62 = 0xea.
  Stop term{Stop::kTerminated};
  term.status = 11;
  EXPECT_EQ(stub.Stopped(term), "$X0b#ea");
}

TEST_F(StubTest, ExitEndsResumes) {
  Resume("c");
  Stop exited{Stop::kExited};
  exited.status = 0x103;  // only the low 8 bits travel
  // "W03": 0x57 + 0x30 + 0x33 = 0xba.
  EXPECT_EQ(stub.Stopped(exited), "$W03#ba");
  EXPECT_EQ(Ask("?"), "W03");
  EXPECT_EQ(Ask("c"), "E01");
  EXPECT_EQ(Ask("vCont;s"), "E01");
  EXPECT_FALSE(stub.running());
}

TEST_F(StubTest, PacketsWhileRunningAreAnsweredAfterTheStop) {
  Resume("c");
  EXPECT_EQ(Send("qC"), "+");  // acked, not answered yet
  EXPECT_EQ(stub.Receive("-"), "");  // nothing to resend while running
  EXPECT_EQ(stub.Stopped(Stop{Stop::kStep}), "$T05thread:1;#d7$QC1#c5");
  // A held resume runs the guest again; what follows it waits once more.
  Resume("c");
  Send("s");
  Send("qC");
  EXPECT_EQ(stub.Stopped(Stop{Stop::kStep}), "$T05thread:1;#d7");
  EXPECT_TRUE(stub.running());
  EXPECT_EQ(stub.TakeResume()->kind, gdb::Resume::kStep);
  EXPECT_EQ(stub.Stopped(Stop{Stop::kStep}), "$T05thread:1;#d7$QC1#c5");
  // A flood while running is bounded (4 held packets).
  Resume("c");
  for (int i = 0; i < 100; i++) Send("qC");
  EXPECT_EQ(stub.Stopped(Stop{Stop::kStep}), "$T05thread:1;#d7" + std::string("$QC1#c5$QC1#c5$QC1#c5$QC1#c5"));
}

TEST_F(StubTest, Breakpoints) {
  EXPECT_EQ(Ask("Z0,1000,1"), "OK");
  EXPECT_EQ(Ask("Z1,2000,1"), "OK");
  EXPECT_EQ(Ask("Z2,3000,4"), "OK");
  EXPECT_THAT(target.points, ElementsAre(std::make_tuple(PointType::kSoftware, 0x1000u, 1u),
                                         std::make_tuple(PointType::kHardware, 0x2000u, 1u),
                                         std::make_tuple(PointType::kWrite, 0x3000u, 4u)));
  EXPECT_EQ(Ask("z0,1000,1"), "OK");
  // Removing it twice: the target's NotFound is an error (EINVAL, "E22":
  // 0x45 + 0x32 + 0x32 = 0xa9).
  EXPECT_EQ(Send("z0,1000,1"), "+$E22#a9");
  EXPECT_EQ(Ask("Z0,1000,1;X2,ab"), "OK");  // conditions are ignored
  target.point_status = absl::UnimplementedError("no read watchpoints");
  EXPECT_EQ(Ask("Z3,1000,4"), "");  // unsupported -> empty
  target.point_status = absl::ResourceExhaustedError("no free debug register");
  EXPECT_EQ(Ask("Z1,1000,1"), "E22");
  EXPECT_EQ(Ask("Z5,1000,1"), "");  // a type we do not know
  for (const char* bad : {"Z0", "Z0,1000", "Z0,zz,1", "Z0,1000,1,2", "Zq,1000,1", "z", "Z,,"})
    EXPECT_EQ(Ask(bad), "E01") << bad;
}

TEST_F(StubTest, KillAndDetach) {
  {
    FakeTarget t;
    Stub s(t, {});
    // k has no reply: just the ack.  Then the session is over.
    EXPECT_EQ(s.Receive(EncodePacket("k")), "+");
    EXPECT_TRUE(s.killed());
    EXPECT_EQ(s.Receive(EncodePacket("g")), "");
  }
  EXPECT_EQ(Ask("Qbtrace:bts"), "OK");
  EXPECT_EQ(Ask("D"), "OK");
  EXPECT_TRUE(stub.detached());
  EXPECT_FALSE(target.btrace_on);  // the guest runs on without GDB's trace
  EXPECT_FALSE(stub.btrace().active());
  EXPECT_EQ(Send("g"), "");
}

TEST_F(StubTest, Monitor) {
  // "hello" in hex is 68656c6c6f; the reply is the hex of the target's text.
  EXPECT_EQ(Ask("qRcmd,68656c6c6f"), ToHex("you said: hello\n"));
  EXPECT_EQ(Ask("qRcmd," + ToHex("quiet")), "OK");  // no output
  EXPECT_EQ(Ask("qRcmd," + ToHex("fail")), "E01");
  EXPECT_EQ(Ask("qRcmd,6"), "E01");
  EXPECT_EQ(Ask("qRcmd,zz"), "E01");
  // A long command's echo (8196 bytes) is cut to (kMaxPacket - 1) / 2 =
  // 8191 bytes, 16382 hex digits.
  EXPECT_EQ(Ask("qRcmd," + ToHex(std::string(8185, 'a'))).size(), kMaxPacket - 2);
}

TEST_F(StubTest, TargetXmlInChunks) {
  const std::string xml = TargetXml(Arch::kX86_64);
  std::string got;
  for (size_t off = 0;;) {
    std::string r = Ask(absl::StrFormat("qXfer:features:read:target.xml:%x,%x", off, 1000));
    ASSERT_FALSE(r.empty());
    got += r.substr(1);
    off += r.size() - 1;
    if (r[0] == 'l') break;
    ASSERT_EQ(r[0], 'm');
    ASSERT_EQ(r.size(), 1001u);
  }
  EXPECT_EQ(got, xml);
  EXPECT_EQ(Ask(absl::StrFormat("qXfer:features:read:target.xml:%x,10", xml.size())), "l");
  EXPECT_EQ(Ask("qXfer:features:read:target.xml:0,ffffffffffffffff"), "l" + xml);
  EXPECT_EQ(Ask("qXfer:features:read:i386-64bit.xml:0,1000"), "E00");
  EXPECT_EQ(Ask("qXfer:features:read:target.xml:0,0"), "E00");
  EXPECT_EQ(Ask("qXfer:features:read:target.xml:zz,10"), "E00");
  EXPECT_EQ(Ask("qXfer:features:read:target.xml"), "E00");
  EXPECT_EQ(Ask("qXfer:features:write:target.xml:0:abc"), "");
  EXPECT_EQ(Ask("qXfer:threads:read::0,1000"), "");
}

TEST_F(StubTest, TheExecFileOnlyWhenThereIsOne) {
  // Not offered by default: qSupported without it, qXfer of it unsupported.
  EXPECT_EQ(Ask("qSupported").find("exec-file"), std::string::npos);
  EXPECT_EQ(Ask("qXfer:exec-file:read:1:0,fff"), "");
  Stub with(target, StubOptions{Arch::kI386, "/images/gdb_demo.elf"});
  auto ask = [&with](absl::string_view p) {
    std::string out = with.Receive(EncodePacket(p));
    if (!out.empty() && out[0] == '+') out.erase(0, 1);
    return out.size() < 4 ? out : *Unescape(out.substr(1, out.size() - 4));
  };
  EXPECT_EQ(ask("qSupported"),
            "PacketSize=4000;qXfer:features:read+;QStartNoAckMode+;swbreak+;hwbreak+;vContSupported+;"
            "Qbtrace:bts+;Qbtrace:off+;Qbtrace-conf:bts:size+;qXfer:btrace:read+;qXfer:btrace-conf:read+;"
            "qXfer:exec-file:read+");
  // The annex (a process id, or empty) names the one process there is.
  EXPECT_EQ(ask("qXfer:exec-file:read:1:0,fff"), "l/images/gdb_demo.elf");
  EXPECT_EQ(ask("qXfer:exec-file:read::0,fff"), "l/images/gdb_demo.elf");
  EXPECT_EQ(ask("qXfer:exec-file:read:1:8,4"), "mgdb_");
  EXPECT_EQ(ask("qXfer:exec-file:read:1:14,10"), "l");
}

TEST_F(StubTest, BranchTrace) {
  target.regs.st.efer = vcpu::kEferLma;  // 64-bit: the PC is RIP
  target.regs.st.cs.l = true;
  target.regs.st.cr0 = vcpu::kCr0Pe | vcpu::kCr0Pg;
  target.regs.st.rip = 0x100;
  EXPECT_EQ(Ask("Qbtrace:pt"), "E.Intel Processor Trace is not supported: use bts");
  EXPECT_EQ(Ask("Qbtrace:off"), "E.branch trace is not enabled");
  EXPECT_EQ(Ask("Qbtrace-conf:bts:size=10"), "E.bts size must be between 4 KiB and 64 MiB");
  EXPECT_EQ(Ask("Qbtrace-conf:bts:size=ffffffffffffffff"), "E.bts size must be between 4 KiB and 64 MiB");
  EXPECT_EQ(Ask("Qbtrace-conf:bts:size=zz"), "E.bts size must be between 4 KiB and 64 MiB");
  EXPECT_EQ(Ask("Qbtrace-conf:bts:size=1000"), "OK");
  // GDB's own form (remote.c formats the size as 0x%x).
  EXPECT_EQ(Ask("Qbtrace-conf:bts:size=0x10000"), "OK");
  EXPECT_EQ(Ask("Qbtrace-conf:bts:size=0x"), "E.bts size must be between 4 KiB and 64 MiB");
  EXPECT_EQ(Ask("Qbtrace-conf:bts:size=0x1000"), "OK");
  EXPECT_EQ(Ask("qXfer:btrace:read:all:0,1000"), "E.branch trace is not enabled");

  target.btrace_status = absl::FailedPreconditionError("the engine cannot trace here");
  EXPECT_EQ(Ask("Qbtrace:bts"), "E.the engine cannot trace here");
  target.btrace_status = absl::OkStatus();
  EXPECT_EQ(Ask("Qbtrace:bts"), "OK");
  EXPECT_TRUE(target.btrace_on);
  EXPECT_EQ(Ask("Qbtrace:bts"), "E.branch trace is already enabled");
  EXPECT_EQ(Ask("qXfer:btrace-conf:read::0,1000"),
            "l<?xml version=\"1.0\"?>\n<!DOCTYPE btrace-conf SYSTEM \"btrace-conf.dtd\">\n"
            "<btrace-conf version=\"1.0\">\n<bts size=\"0x1000\"/>\n</btrace-conf>\n");
  EXPECT_EQ(Ask("qXfer:btrace-conf:read:x:0,1000"), "E00");

  // The machine feeds the trace: 0x100 jmp 0x200, 0x200 falls through.
  pmu::Branch jmp;
  jmp.kind = pmu::BranchKind::kJmp;
  jmp.from = 0x100;
  jmp.to = 0x200;
  stub.btrace().Add(jmp);
  pmu::Branch insn;
  insn.from = 0x200;
  insn.to = 0x202;
  stub.btrace().Add(insn);
  target.regs.st.rip = 0x202;
  const std::string all =
      "<?xml version=\"1.0\"?>\n<!DOCTYPE btrace SYSTEM \"btrace.dtd\">\n<btrace version=\"1.0\">\n"
      "<block begin=\"0x200\" end=\"0x202\"/>\n<block begin=\"0x100\" end=\"0x100\"/>\n</btrace>\n";
  // Chunked: the document is made at offset 0 and the rest comes from it.
  EXPECT_EQ(Ask("qXfer:btrace:read:all:0,20"), "m" + all.substr(0, 0x20));
  EXPECT_EQ(Ask("qXfer:btrace:read:all:20,1000"), "l" + all.substr(0x20));
  // A chunk of a document not started: error.
  EXPECT_EQ(Ask("qXfer:btrace:read:delta:20,1000"), "E00");
  // Nothing ran since: delta is one block ending at the PC.
  EXPECT_EQ(Ask("qXfer:btrace:read:delta:0,1000"),
            "l<?xml version=\"1.0\"?>\n<!DOCTYPE btrace SYSTEM \"btrace.dtd\">\n<btrace version=\"1.0\">\n"
            "<block begin=\"0x0\" end=\"0x202\"/>\n</btrace>\n");
  EXPECT_EQ(Ask("qXfer:btrace:read:bogus:0,1000"), "E.unknown branch trace annex \"bogus\"");

  EXPECT_EQ(Ask("Qbtrace:off"), "OK");
  EXPECT_FALSE(target.btrace_on);
  EXPECT_EQ(Ask("qXfer:btrace-conf:read::0,1000"),
            "l<?xml version=\"1.0\"?>\n<!DOCTYPE btrace-conf SYSTEM \"btrace-conf.dtd\">\n"
            "<btrace-conf version=\"1.0\">\n</btrace-conf>\n");
}

TEST_F(StubTest, BadClients) {
  // A bad checksum gets `-` (g is 0x67).
  EXPECT_EQ(stub.Receive("$g#00"), "-");
  EXPECT_EQ(stub.Receive("$g#"), "");  // incomplete: waits
  EXPECT_EQ(stub.Receive("x1"), "-");   // 'x' is no hex digit
  // Too long: `-`, and the decoder never holds more than kMaxPacket.
  EXPECT_EQ(stub.Receive("$" + std::string(kMaxPacket + 100, 'm') + "#00"), "-");
  // Noise between packets is ignored.
  EXPECT_EQ(stub.Receive("\r\n\xff garbage"), "");
  // `-` resends the last packet sent.
  const std::string qc = Send("qC");
  EXPECT_EQ(qc, "+$QC1#c5");
  EXPECT_EQ(stub.Receive("-"), "$QC1#c5");
  EXPECT_EQ(stub.Receive("-"), "$QC1#c5");
  // Byte by byte gives the same answer as at once.
  std::string out;
  for (char c : EncodePacket("m1000,4")) out += stub.Receive(std::string(1, c));
  EXPECT_EQ(out, "+$00000000#80");  // "00000000": 8 * 0x30 = 0x180 -> 80
  // Several packets in one read, acks from the client between them ("qC":
  // 0x71 + 0x43 = 0xb4; "qfThreadInfo" sums to 0x4bb; "m1" to 0x9e).
  EXPECT_EQ(stub.Receive("+$qC#b4+$qfThreadInfo#bb"), "+$QC1#c5+$m1#9e");
  // Malformed everything: E01 or empty, never a crash.
  for (const char* p : {"G", "P", "Pzz=", "H", "Z", "qXfer:", "qXfer:btrace:read:all:", "vCont;r,",
                        "X", "M", "m,", "cffffffffffffffffff", "C05;zz"}) {
    std::string r = Ask(p);
    EXPECT_TRUE(r.empty() || r[0] == 'E' || r == "OK") << p << " -> " << r;
  }
}

}  // namespace
}  // namespace vbts::gdb
