// main.cc: the vbts command line (see docs/cli.md).
#include <signal.h>

#include "vmm/cli.h"

int main(int argc, char** argv) {
  // A file-size limit (RLIMIT_FSIZE) would otherwise kill vbts in the middle
  // of a trace block: ignored, the write fails with EFBIG and vbts record
  // ends with its error and a file whose complete blocks report
  // (docs/trace-format.md).
  signal(SIGXFSZ, SIG_IGN);
  return vbts::vmm::CliMain(argc, argv);
}
