// symbol_elf.h: a symbol table as an ELF64 file that GDB loads with
// `symbol-file` or `add-symbol-file` (`vbts symbols`, docs/gdb.md): for a guest
// kernel whose only symbols are a System.map or its own /proc/kallsyms, GDB
// then names functions in `bt`, `x/i` and `info symbol` and breaks at them.
#ifndef VBTS_RECORD_SYMBOL_ELF_H_
#define VBTS_RECORD_SYMBOL_ELF_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "record/symbols.h"

namespace vbts::record {

// An ELF64 x86-64 ET_EXEC file with no program headers and four sections:
// .text (SHT_NOBITS, ALLOC|EXECINSTR, from the lowest symbol to the end of
// the highest one's extent: no bytes in the file, GDB reads code from the
// target), .symtab, .strtab, .shstrtab.  Each symbol is an STT_FUNC in .text
// sized by its extent (SymbolTable::Extent), global or local as the table
// says (locals first, as the gABI requires).  InvalidArgument for an empty
// table.
absl::StatusOr<std::vector<uint8_t>> SymbolElf(const SymbolTable& table);

}  // namespace vbts::record

#endif  // VBTS_RECORD_SYMBOL_ELF_H_
