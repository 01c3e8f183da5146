// registers.h: the registers GDB sees and their target descriptions
// (qXfer:features:read:target.xml): i386 or amd64 ("org.gnu.gdb.i386.core",
// ".sse", ".segments" as GDB's own descriptions name them) plus the system
// registers QEMU's x86 gdbstub shows (k_gs_base, cr0, cr2, cr3, cr4, cr8,
// efer).  The order of the description is the order of the `g` packet and
// the numbers of `p`/`P`.
#ifndef VBTS_GDB_REGISTERS_H_
#define VBTS_GDB_REGISTERS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gdb/target.h"

namespace vbts::gdb {

enum class Arch { kI386, kX86_64 };
const char* ArchName(Arch a);  // "i386", "i386:x86-64"

// The whole target.xml (one document, no includes).
std::string TargetXml(Arch arch);
int RegisterCount(Arch arch);
// Register number of a name ("rip", "eflags", "cr3"...), if any.
std::optional<int> RegisterNumber(Arch arch, absl::string_view name);

// `g` reply: every register, hex, little-endian, in description order.
std::string EncodeRegisters(Arch arch, const Registers& regs);
// `p` reply; nullopt for a number the description does not have.
std::optional<std::string> EncodeRegister(Arch arch, int regno, const Registers& regs);
// `G` / `P`: the hex must be exactly as long as the register(s).
absl::Status DecodeRegisters(Arch arch, absl::string_view hex, Registers& regs);
absl::Status DecodeRegister(Arch arch, int regno, absl::string_view hex, Registers& regs);

}  // namespace vbts::gdb

#endif  // VBTS_GDB_REGISTERS_H_
