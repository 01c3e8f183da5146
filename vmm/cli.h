// cli.h: `vbts` subcommands (run, info) and their options; see docs/cli.md.
#ifndef VBTS_VMM_CLI_H_
#define VBTS_VMM_CLI_H_

namespace vbts::vmm {

// Parses argv, runs the subcommand and returns the process exit status
// (docs/cli.md, "Exit status").
int CliMain(int argc, char** argv);

}  // namespace vbts::vmm

#endif  // VBTS_VMM_CLI_H_
