// exit_status.h: the process exit statuses of `vbts run` (docs/cli.md). Guest
// verdicts are odd ((v << 1) | 1, as QEMU's isa-debug-exit); every status vbts
// itself produces is even, so the two can never be confused.
#ifndef VBTS_BASE_EXIT_STATUS_H_
#define VBTS_BASE_EXIT_STATUS_H_


namespace vbts {

inline constexpr int kExitPowerOff = 0;          // the guest powered the machine off (ACPI S5), as QEMU exits
inline constexpr int kExitUsage = 2;             // bad command line
inline constexpr int kExitKilled = 114;          // the debugger ended the run (gdb `kill`)
inline constexpr int kExitVbtsError = 116;       // bad image, no /dev/kvm, host/KVM failure
inline constexpr int kExitUnsupported = 118;     // guest needs what neither this host nor vbts can do
inline constexpr int kExitTripleFault = 120;     // guest shut down (triple fault)
inline constexpr int kExitHaltedIfClear = 122;   // guest halted with interrupts disabled
inline constexpr int kExitTimeout = 124;         // --timeout expired (as timeout(1))
inline constexpr int kExitSignalled = 130;       // SIGINT, SIGTERM or SIGHUP ended the run (128 + SIGINT, as shells)

}  // namespace vbts

#endif  // VBTS_BASE_EXIT_STATUS_H_
