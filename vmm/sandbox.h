// sandbox.h: vbts's system-call filter (issue 13, docs/security.md).  Once the
// machine is set up (image read, RAM mapped, VM and vCPU made, output files
// open, the gdb socket listening), vbts's threads only run the guest: KVM
// ioctls, reads and writes of descriptors they already have, memory
// management, clocks, sleeps, signals, threads' futexes and the gdb client's
// socket.  A seccomp-bpf allowlist (libseccomp) then holds every thread of the
// process to exactly that; any other call raises SIGSYS, whose handler prints
// which call it was and ends vbts with status 116.
#ifndef VBTS_VMM_SANDBOX_H_
#define VBTS_VMM_SANDBOX_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace vbts::vmm {

// The system calls allowed after setup, by name.
const std::vector<std::string>& SandboxAllowedCalls();
// libseccomp's version ("2.5.4"), for `vbts info`.
std::string SandboxLibraryVersion();

// Installs the filter on every thread of the process (SECCOMP_FILTER_FLAG_TSYNC)
// and sets no_new_privs.  Irreversible.  Fails (and changes nothing) if the
// kernel refuses the filter.
absl::Status EnterSandbox();

}  // namespace vbts::vmm

#endif  // VBTS_VMM_SANDBOX_H_
