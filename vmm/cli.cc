// cli.cc: argument parsing (CLI11) and subcommand dispatch.
#include "vmm/cli.h"

#include <CLI/CLI.hpp>
#include <cstdio>

namespace vbts::vmm {

int CliMain(int argc, char** argv) {
  CLI::App app{"vbts: a KVM hypervisor with virtual Intel branch tracing (BTS, LBR, BTF, PMU)"};
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}

}  // namespace vbts::vmm
