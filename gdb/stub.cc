// stub.cc: the GDB remote protocol state machine (gdb/stub.h).
//
// Packets and replies as the GDB manual ("Packets", "Stop Reply Packets",
// "General Query Packets", "Branch Trace Format") describes them, for an
// all-stop target with one thread (thread id 1).  Error replies: E01 for a
// packet vbts cannot parse, E14 (EFAULT) for memory that is not there, E22
// (EINVAL) for a breakpoint the target refuses, E00 for an unknown qXfer
// annex, `E.text` where GDB shows the text (branch trace).  Every reply is
// bounded: memory reads are cut to kMaxPacket/2 bytes, qXfer chunks to
// kMaxPacket once escaped, monitor output likewise.
#include "gdb/stub.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"

namespace vbts::gdb {
namespace {

constexpr char kSupported[] =
    "PacketSize=4000;qXfer:features:read+;QStartNoAckMode+;swbreak+;hwbreak+;vContSupported+;"
    "Qbtrace:bts+;Qbtrace:off+;Qbtrace-conf:bts:size+;qXfer:btrace:read+;qXfer:btrace-conf:read+";
static_assert(kMaxPacket == 0x4000, "PacketSize in kSupported");

// Packets held while the guest runs (GDB sends none; see stub.h).
constexpr size_t kMaxHeld = 4;
// Bounds of Qbtrace-conf:bts:size: a few BTS records up to what a Linux
// perf BTS buffer would sensibly be.
constexpr uint64_t kMinBtsSize = 4 << 10, kMaxBtsSize = 64 << 20;
// Longest text of an `E.text` reply.
constexpr size_t kMaxErrorText = 200;

// `E.text` with the text cut to a sane length.
std::string ErrorText(absl::string_view text) {
  return absl::StrCat("E.", text.substr(0, kMaxErrorText));
}

// "A,B" as two hex numbers.
std::optional<std::pair<uint64_t, uint64_t>> ParsePair(absl::string_view s) {
  const size_t comma = s.find(',');
  if (comma == absl::string_view::npos) return std::nullopt;
  std::optional<uint64_t> a = ParseHexNumber(s.substr(0, comma));
  std::optional<uint64_t> b = ParseHexNumber(s.substr(comma + 1));
  if (!a || !b) return std::nullopt;
  return std::make_pair(*a, *b);
}

// Whether a thread id of vCont names our one thread: -1 (all), 0 (any) or
// 1, optionally in the multiprocess form pPID[.TID] with PID 1/-1/0;
// nullopt for something that is no thread id.
std::optional<bool> ThreadMatches(absl::string_view tid) {
  auto one = [](absl::string_view id) -> std::optional<bool> {
    if (id == "-1") return true;
    std::optional<uint64_t> v = ParseHexNumber(id);
    if (!v) return std::nullopt;
    return *v <= 1;
  };
  if (tid.empty() || tid[0] != 'p') return one(tid);
  tid.remove_prefix(1);
  const size_t dot = tid.find('.');
  std::optional<bool> pid = one(tid.substr(0, dot));
  if (!pid || dot == absl::string_view::npos) return pid;
  std::optional<bool> thread = one(tid.substr(dot + 1));
  if (!thread) return std::nullopt;
  return *pid && *thread;
}

}  // namespace

Stub::Stub(Target& target, StubOptions options) : target_(target), options_(options) {}

std::string Stub::Receive(absl::string_view bytes) {
  std::string out;
  if (killed_ || detached_) return out;  // the session is over
  std::vector<RspEvent> events;
  decoder_.Feed(bytes, events);
  for (RspEvent& ev : events) {
    if (killed_ || detached_) break;
    OnEvent(ev, out);
  }
  return out;
}

void Stub::OnEvent(RspEvent& ev, std::string& out) {
  switch (ev.kind) {
    case RspEvent::kAck:
      break;
    case RspEvent::kNack:
      // While the guest runs, the last packet is the one before the resume:
      // resending it would answer a question nobody asked.
      if (!no_ack_ && !running_) out += last_sent_;
      break;
    case RspEvent::kBadChecksum:
    case RspEvent::kTooLong:
      if (!no_ack_) out += '-';
      break;
    case RspEvent::kInterrupt:
      if (running_) interrupt_requested_ = true;  // stopped: a late Ctrl-C, nothing to stop
      break;
    case RspEvent::kPacket: {
      if (!no_ack_) out += '+';
      if (running_) {
        if (held_.size() < kMaxHeld) held_.push_back(std::move(ev.payload));
        break;
      }
      std::optional<std::string> reply = Handle(ev.payload);
      if (reply) Reply(*reply, out);
      break;
    }
  }
}

void Stub::Reply(const std::string& payload, std::string& out) {
  last_sent_ = EncodePacket(payload);
  out += last_sent_;
}

std::optional<Resume> Stub::TakeResume() { return std::exchange(resume_, std::nullopt); }

std::string Stub::Stopped(const Stop& stop) {
  const bool asked = running_;
  running_ = false;
  interrupt_requested_ = false;
  last_stop_ = stop;
  if (stop.kind == Stop::kExited || stop.kind == Stop::kTerminated) exited_ = true;
  std::string out;
  // At attach GDB has not asked anything yet (it will, with `?`): an
  // unsolicited stop reply would be taken as the answer to its first packet.
  if (!asked) return out;
  Reply(StopReply(stop), out);
  std::vector<std::string> held = std::move(held_);
  held_.clear();
  for (size_t i = 0; i < held.size(); i++) {
    if (killed_ || detached_) break;
    if (running_) {  // a held packet resumed the guest: the rest wait again
      held_.assign(std::make_move_iterator(held.begin() + i), std::make_move_iterator(held.end()));
      break;
    }
    std::optional<std::string> reply = Handle(held[i]);
    if (reply) Reply(*reply, out);
  }
  return out;
}

std::string Stub::StopReply(const Stop& stop) const {
  switch (stop.kind) {
    case Stop::kStep:
      return "T05thread:1;";
    case Stop::kBreakpoint:
      // swbreak/hwbreak only to a client that said it understands them
      // (qSupported); GDB then need not adjust the PC itself.
      if (stop.point == PointType::kSoftware && swbreak_) return "T05swbreak:;thread:1;";
      if (stop.point == PointType::kHardware && hwbreak_) return "T05hwbreak:;thread:1;";
      return "T05thread:1;";
    case Stop::kWatchpoint: {
      const char* reason = stop.point == PointType::kWrite  ? "watch"
                           : stop.point == PointType::kRead ? "rwatch"
                           : stop.point == PointType::kAccess ? "awatch"
                                                              : nullptr;
      if (!reason) return "T05thread:1;";
      return absl::StrFormat("T05%s:%x;thread:1;", reason, stop.address);
    }
    case Stop::kInterrupted:
      return ever_resumed_ ? "T02thread:1;" : "T05thread:1;";
    case Stop::kExited:
      return absl::StrFormat("W%02x", stop.status & 0xff);
    case Stop::kTerminated:
      return absl::StrFormat("X%02x", stop.status & 0xff);
  }
  return "T05thread:1;";
}

std::optional<std::string> Stub::Handle(absl::string_view packet) {
  if (packet.empty()) return std::string();
  const absl::string_view rest = packet.substr(1);
  switch (packet[0]) {
    case '?':
      return StopReply(last_stop_);
    case 'g':
      return EncodeRegisters(options_.arch, target_.ReadRegisters());
    case 'G': {
      Registers regs = target_.ReadRegisters();
      if (!DecodeRegisters(options_.arch, rest, regs).ok()) return std::string("E01");
      if (!target_.WriteRegisters(regs).ok()) return std::string("E01");
      return std::string("OK");
    }
    case 'p': {
      std::optional<uint64_t> n = ParseHexNumber(rest);
      if (!n || *n >= static_cast<uint64_t>(RegisterCount(options_.arch))) return std::string("E01");
      std::optional<std::string> hex = EncodeRegister(options_.arch, static_cast<int>(*n), target_.ReadRegisters());
      return hex ? *hex : std::string("E01");
    }
    case 'P': {
      const size_t eq = rest.find('=');
      if (eq == absl::string_view::npos) return std::string("E01");
      std::optional<uint64_t> n = ParseHexNumber(rest.substr(0, eq));
      if (!n || *n >= static_cast<uint64_t>(RegisterCount(options_.arch))) return std::string("E01");
      Registers regs = target_.ReadRegisters();
      if (!DecodeRegister(options_.arch, static_cast<int>(*n), rest.substr(eq + 1), regs).ok())
        return std::string("E01");
      if (!target_.WriteRegisters(regs).ok()) return std::string("E01");
      return std::string("OK");
    }
    case 'm':
      return ReadMemory(rest);
    case 'M':
      return WriteMemory(rest, false);
    case 'X':
      return WriteMemory(rest, true);
    case 'c':
      return ResumeFrom({Resume::kContinue}, rest);
    case 's':
      return ResumeFrom({Resume::kStep}, rest);
    case 'C':
    case 'S': {
      // Csig[;addr]: the signal means nothing to a bare-metal guest.
      const size_t semi = rest.find(';');
      if (!ParseHexNumber(rest.substr(0, semi))) return std::string("E01");
      const absl::string_view addr = semi == absl::string_view::npos ? "" : rest.substr(semi + 1);
      if (semi != absl::string_view::npos && addr.empty()) return std::string("E01");
      return ResumeFrom({packet[0] == 'C' ? Resume::kContinue : Resume::kStep}, addr);
    }
    case 'H':  // Hg/Hc: there is only thread 1
    case 'T':  // thread alive
      return std::string("OK");
    case 'k':
      killed_ = true;
      return std::nullopt;  // no reply to k
    case 'D':
      // The guest goes on without a debugger: it no longer pays for GDB's
      // branch trace.
      if (btrace_.active()) {
        (void)target_.SetBranchTrace(false);
        btrace_.Stop();
      }
      detached_ = true;
      return std::string("OK");
    case 'Z':
      return Point(true, rest);
    case 'z':
      return Point(false, rest);
    case 'q':
      return Query(packet);
    case 'Q':
      return SetQ(packet);
    case 'v':
      if (packet == "vCont?") return std::string("vCont;c;C;s;S;r");
      if (absl::StartsWith(packet, "vCont;")) return VCont(packet.substr(6));
      if (packet == "vKill" || absl::StartsWith(packet, "vKill;")) {
        killed_ = true;
        return std::string("OK");
      }
      return std::string();  // vMustReplyEmpty and everything else unsupported
    default:
      return std::string();  // unsupported: the empty reply
  }
}

std::string Stub::ReadMemory(absl::string_view args) {
  std::optional<std::pair<uint64_t, uint64_t>> p = ParsePair(args);
  if (!p) return "E01";
  const auto [addr, len] = *p;
  if (len == 0) return "";  // zero bytes, as hex
  // A reply longer than our own packet size helps nobody; GDB reads the
  // rest with further packets, as for any short read.
  const size_t n = static_cast<size_t>(std::min<uint64_t>(len, kMaxPacket / 2));
  std::string buf(n, '\0');
  size_t got = target_.ReadMemory(addr, absl::MakeSpan(reinterpret_cast<uint8_t*>(buf.data()), n));
  got = std::min(got, n);
  if (got == 0) return "E14";
  buf.resize(got);
  return ToHex(buf);
}

std::string Stub::WriteMemory(absl::string_view args, bool binary) {
  const size_t colon = args.find(':');
  if (colon == absl::string_view::npos) return "E01";
  std::optional<std::pair<uint64_t, uint64_t>> p = ParsePair(args.substr(0, colon));
  if (!p) return "E01";
  const auto [addr, len] = *p;
  const absl::string_view data = args.substr(colon + 1);
  // The data of a packet is at most kMaxPacket bytes: check before
  // decoding anything a huge length would not match anyway.
  if (len > kMaxPacket) return "E01";
  std::optional<std::string> bytes = binary ? Unescape(data) : FromHex(data);
  if (!bytes || bytes->size() != len) return "E01";
  // `X addr,0:` is how GDB probes for binary downloads: OK says "supported".
  if (len == 0) return "OK";
  const size_t wrote = target_.WriteMemory(
      addr, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()));
  return wrote < len ? "E14" : "OK";
}

std::optional<std::string> Stub::ResumeFrom(Resume r, absl::string_view addr) {
  if (exited_) return std::string("E01");  // nothing left to run
  if (!addr.empty()) {
    std::optional<uint64_t> a = ParseHexNumber(addr);
    if (!a) return std::string("E01");
    Registers regs = target_.ReadRegisters();
    regs.st.rip = options_.arch == Arch::kI386 ? (*a & 0xffffffffu) : *a;
    if (!target_.WriteRegisters(regs).ok()) return std::string("E01");
  }
  resume_ = r;
  running_ = true;
  ever_resumed_ = true;
  interrupt_requested_ = false;
  return std::nullopt;  // the stop reply comes from Stopped
}

std::optional<std::string> Stub::VCont(absl::string_view actions) {
  // GDB manual, "vCont": for each thread the leftmost action whose thread
  // id matches applies; only our thread 1 exists.
  for (absl::string_view action : absl::StrSplit(actions, ';')) {
    bool ours = true;  // no thread id: every thread
    const size_t colon = action.find(':');
    if (colon != absl::string_view::npos) {
      std::optional<bool> m = ThreadMatches(action.substr(colon + 1));
      if (!m) return std::string("E01");
      ours = *m;
      action = action.substr(0, colon);
    }
    Resume r;
    if (action == "c") {
      r.kind = Resume::kContinue;
    } else if (action == "s") {
      r.kind = Resume::kStep;
    } else if (!action.empty() && (action[0] == 'C' || action[0] == 'S')) {
      if (!ParseHexNumber(action.substr(1))) return std::string("E01");
      r.kind = action[0] == 'C' ? Resume::kContinue : Resume::kStep;
    } else if (!action.empty() && action[0] == 'r') {
      std::optional<std::pair<uint64_t, uint64_t>> range = ParsePair(action.substr(1));
      if (!range || range->first > range->second) return std::string("E01");
      r.kind = Resume::kRange;
      r.start = range->first;
      r.end = range->second;
    } else {
      return std::string("E01");  // t (non-stop only) or garbage
    }
    if (ours) return ResumeFrom(r, "");
  }
  return std::string("E01");  // no action for thread 1
}

std::string Stub::Point(bool insert, absl::string_view args) {
  // type,addr,kind[;cond...]: we do not advertise conditions, so ignore them.
  args = args.substr(0, args.find(';'));
  std::vector<absl::string_view> f = absl::StrSplit(args, ',');
  if (f.size() != 3) return "E01";
  std::optional<uint64_t> type = ParseHexNumber(f[0]);
  std::optional<uint64_t> addr = ParseHexNumber(f[1]);
  std::optional<uint64_t> kind = ParseHexNumber(f[2]);
  if (!type || !addr || !kind) return "E01";
  if (*type > 4) return "";  // a type the protocol may grow: unsupported
  const PointType t = static_cast<PointType>(*type);
  absl::Status s = insert ? target_.InsertPoint(t, *addr, *kind) : target_.RemovePoint(t, *addr, *kind);
  if (s.ok()) return "OK";
  if (absl::IsUnimplemented(s)) return "";
  return "E22";
}

std::string Stub::Query(absl::string_view packet) {
  if (packet == "qC") return "QC1";
  if (packet == "qfThreadInfo") return "m1";
  if (packet == "qsThreadInfo") return "l";
  if (packet == "qAttached" || absl::StartsWith(packet, "qAttached:")) return "1";
  if (packet == "qSupported" || absl::StartsWith(packet, "qSupported:")) {
    swbreak_ = hwbreak_ = false;
    if (packet.size() > 11) {
      for (absl::string_view feature : absl::StrSplit(packet.substr(11), ';')) {
        if (feature == "swbreak+") swbreak_ = true;
        if (feature == "hwbreak+") hwbreak_ = true;
      }
    }
    return options_.exec_file.empty() ? std::string(kSupported) : absl::StrCat(kSupported, ";qXfer:exec-file:read+");
  }
  if (packet == "qSymbol" || absl::StartsWith(packet, "qSymbol:")) return "OK";  // no symbols wanted
  if (absl::StartsWith(packet, "qRcmd,")) {
    std::optional<std::string> command = FromHex(packet.substr(6));
    if (!command) return "E01";
    absl::StatusOr<std::string> text = target_.Monitor(*command);
    if (!text.ok()) return "E01";
    if (text->empty()) return "OK";  // an empty reply would mean "unsupported"
    // Hex doubles the text: keep the reply within our packet size.
    return ToHex(absl::string_view(*text).substr(0, (kMaxPacket - 1) / 2));
  }
  if (absl::StartsWith(packet, "qXfer:")) {
    // qXfer:OBJECT:read:ANNEX:OFFSET,LENGTH
    std::vector<absl::string_view> f = absl::StrSplit(packet.substr(6), absl::MaxSplits(':', 3));
    if (f.size() != 4) return "E00";
    if (f[1] != "read") return "";  // no writable objects
    return Xfer(f[0], f[2], f[3]);
  }
  return "";  // qOffsets, qTStatus and anything else: unsupported
}

std::string Stub::Xfer(absl::string_view object, absl::string_view annex, absl::string_view range) {
  std::optional<std::pair<uint64_t, uint64_t>> r = ParsePair(range);
  if (!r || r->second == 0) return "E00";
  const auto [offset, length] = *r;
  std::string fresh;
  const std::string* doc = &fresh;
  if (object == "features") {
    if (annex != "target.xml") return "E00";
    fresh = TargetXml(options_.arch);
  } else if (object == "exec-file" && !options_.exec_file.empty()) {
    fresh = options_.exec_file;  // (the annex names a process: there is one)
  } else if (object == "btrace-conf") {
    if (!annex.empty()) return "E00";
    fresh = btrace_.ConfigXml();
  } else if (object == "btrace") {
    // Reading the trace moves its read point (delta reads count from it),
    // so the document is made once, at offset 0, and the following chunks
    // come from that copy.
    const std::string key = absl::StrCat(object, ":", annex);
    if (offset == 0) {
      xfer_key_.clear();
      xfer_doc_.clear();
      absl::StatusOr<std::string> xml = btrace_.Read(annex, target_.ReadRegisters().st.pc_linear());
      if (!xml.ok()) return ErrorText(xml.status().message());
      xfer_key_ = key;
      xfer_doc_ = *std::move(xml);
    } else if (xfer_key_ != key) {
      return "E00";  // a follow-up chunk of a document never started
    }
    doc = &xfer_doc_;
  } else {
    return "";  // an object we do not offer
  }
  if (offset >= doc->size()) return "l";
  // As many bytes as asked for, as long as the escaped reply fits our
  // packet size (one byte goes to the m/l prefix).
  size_t n = 0, cost = 0;
  const size_t avail = doc->size() - static_cast<size_t>(offset);
  while (n < avail && n < length) {
    const char c = (*doc)[offset + n];
    const size_t k = (c == '#' || c == '$' || c == '}' || c == '*') ? 2 : 1;
    if (cost + k > kMaxPacket - 1) break;
    cost += k;
    n++;
  }
  return absl::StrCat(n == avail ? "l" : "m", absl::string_view(*doc).substr(offset, n));
}

std::string Stub::SetQ(absl::string_view packet) {
  if (packet == "QStartNoAckMode") {
    no_ack_ = true;  // this packet was still acked (OnEvent), its reply is the last ack'ed one
    return "OK";
  }
  if (packet == "Qbtrace:bts") {
    if (btrace_.active()) return ErrorText("branch trace is already enabled");
    absl::Status s = target_.SetBranchTrace(true);
    if (!s.ok()) return ErrorText(s.message());
    btrace_.Start(target_.ReadRegisters().st.pc_linear(), btrace_size_);
    return "OK";
  }
  if (packet == "Qbtrace:off") {
    if (!btrace_.active()) return ErrorText("branch trace is not enabled");
    absl::Status s = target_.SetBranchTrace(false);
    if (!s.ok()) return ErrorText(s.message());
    btrace_.Stop();
    return "OK";
  }
  if (packet == "Qbtrace:pt") return ErrorText("Intel Processor Trace is not supported: use bts");
  if (absl::StartsWith(packet, "Qbtrace-conf:bts:size=")) {
    // GDB sends the size as "0x%x" (remote.c), hex with its prefix.
    absl::string_view text = packet.substr(22);
    if (absl::StartsWith(text, "0x") || absl::StartsWith(text, "0X")) text.remove_prefix(2);
    std::optional<uint64_t> size = ParseHexNumber(text);
    if (!size || *size < kMinBtsSize || *size > kMaxBtsSize)
      return ErrorText("bts size must be between 4 KiB and 64 MiB");
    btrace_size_ = *size;
    return "OK";
  }
  return "";
}

}  // namespace vbts::gdb
