// main.cc: the vbts command line (see docs/cli.md).
#include "vmm/cli.h"

int main(int argc, char** argv) { return vbts::vmm::CliMain(argc, argv); }
