// report_command.h: `vbts report [--format=F] [--symbols=ELF] FILE` (docs/cli.md).
#ifndef VBTS_VMM_REPORT_COMMAND_H_
#define VBTS_VMM_REPORT_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

namespace vbts::record {

struct ReportOptions {
  std::string format = "text";
  std::vector<std::string> symbols;  // merged (SymbolTable::LoadAll); default: the recorded image, if unchanged
  std::string file;
};

// Exit status of `vbts report`: 0 the whole file was read; 1 the file is
// truncated or corrupt (everything before the damage was reported, the
// reason is on stderr); 116 the file cannot be read, is not a vbts trace, has
// an unsupported version, or --symbols cannot be read; 2 bad --format.
inline constexpr int kReportIncomplete = 1;

int ReportCommand(const ReportOptions& options, std::ostream& out);

}  // namespace vbts::record

#endif  // VBTS_VMM_REPORT_COMMAND_H_
