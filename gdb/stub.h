// stub.h: the GDB remote serial protocol for one vCPU (docs/gdb.md), as a
// state machine between the bytes of one client connection and a Target.
// No sockets and no threads here: the server (gdb/server.h) moves bytes,
// the machine (vmm/) runs the guest when the stub asks it to resume and
// reports back where it stopped.
#ifndef VBTS_GDB_STUB_H_
#define VBTS_GDB_STUB_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "gdb/btrace.h"
#include "gdb/registers.h"
#include "gdb/rsp.h"
#include "gdb/target.h"

namespace vbts::gdb {

struct StubOptions {
  Arch arch = Arch::kX86_64;  // the target description GDB is given
  // The guest image's absolute path, offered as the executable
  // (qXfer:exec-file:read, as gdbserver answers it) so that a GDB started
  // without a file loads the image's symbols itself; empty: not offered.
  std::string exec_file;
};

class Stub {
 public:
  Stub(Target& target, StubOptions options);

  // Bytes from the client.  Returns the bytes to send back (acks, replies).
  // While the guest runs only Ctrl-C (0x03) matters: it sets
  // interrupt_requested(); packets other than that are answered after the
  // stop (GDB sends none while it waits for one).
  std::string Receive(absl::string_view bytes);

  // What the client asked the machine to do, once (cleared by the call).
  std::optional<Resume> TakeResume();
  bool interrupt_requested() const { return interrupt_requested_; }
  bool detached() const { return detached_; }  // D: the guest runs on without a client
  bool killed() const { return killed_; }      // k: end the run

  // The guest stopped after a resume (or at attach: kInterrupted).  Returns
  // the bytes to send (the stop reply, then the replies to packets that
  // came while the guest ran), and remembers the stop for `?`.  At attach
  // (no resume pending) it returns nothing: GDB asks with `?` and would
  // take an unsolicited stop reply for the answer to its first packet.
  std::string Stopped(const Stop& stop);
  bool running() const { return running_; }

  BranchTrace& btrace() { return btrace_; }

 private:
  // One packet's payload; the reply payload (framing added by the caller),
  // nullopt when no reply is due now (a resume).
  std::optional<std::string> Handle(absl::string_view packet);
  std::string StopReply(const Stop& stop) const;
  // One decoded event; appends what to send to `out`.
  void OnEvent(RspEvent& ev, std::string& out);
  void Reply(const std::string& payload, std::string& out);
  // Packet handlers (payload without the command letter(s) where noted).
  std::string ReadMemory(absl::string_view args);           // m
  std::string WriteMemory(absl::string_view args, bool binary);  // M, X
  std::optional<std::string> ResumeFrom(Resume r, absl::string_view addr);  // c s C S
  std::optional<std::string> VCont(absl::string_view actions);
  std::string Point(bool insert, absl::string_view args);   // Z z
  std::string Query(absl::string_view packet);              // q...
  std::string Xfer(absl::string_view object, absl::string_view annex, absl::string_view range);
  std::string SetQ(absl::string_view packet);               // Q...

  Target& target_;
  StubOptions options_;
  PacketDecoder decoder_;
  BranchTrace btrace_;
  bool no_ack_ = false;
  bool swbreak_ = false, hwbreak_ = false;  // the client understands these stop reasons
  bool running_ = false;
  bool interrupt_requested_ = false;
  bool detached_ = false, killed_ = false;
  std::optional<Resume> resume_;
  Stop last_stop_{Stop::kInterrupted};
  uint64_t btrace_size_ = BranchTrace::kDefaultSize;

  // The last packet sent, framed, for a client's `-`.
  std::string last_sent_;
  bool ever_resumed_ = false;  // kInterrupted is T02 after a resume, T05 at attach
  bool exited_ = false;        // kExited/kTerminated: no more resumes
  // Packets that arrived while the guest ran, answered after the stop
  // (bounded: GDB sends none in all-stop mode, a bad client gets no more).
  std::vector<std::string> held_;
  // The qXfer document being read in chunks (btrace: generated at offset 0,
  // since reading it moves the trace's read point).
  std::string xfer_key_, xfer_doc_;
};

}  // namespace vbts::gdb

#endif  // VBTS_GDB_STUB_H_
