// stop_signals.h: SIGINT (Ctrl-C), SIGTERM and SIGHUP end a run cleanly
// (docs/cli.md, "Exit status"): the handler only notes the signal; the run
// loops look at it between two runs of the vCPU (at the latest at the next
// kick or TCG slice, every 10 or 50 ms), end the run with status 130, and
// `vbts record` finishes its trace file.  A second such signal, while the
// first is still being handled, ends vbts at once, as the default action
// would have.
#ifndef VBTS_VMM_STOP_SIGNALS_H_
#define VBTS_VMM_STOP_SIGNALS_H_

#include <string>

#include "absl/status/status.h"

namespace vbts::vmm {

// Installs the handlers (without SA_RESTART: a blocked call returns EINTR),
// except for a signal the process ignores already (`nohup` ignores SIGHUP):
// that one stays ignored.
absl::Status InstallStopSignals();
// 0, or the number of the first stop signal received.
int PendingStopSignal();
// "vbts: stopped by SIGINT (Ctrl-C); the run ended cleanly" and the like.
std::string StopSignalMessage(int signal);

}  // namespace vbts::vmm

#endif  // VBTS_VMM_STOP_SIGNALS_H_
