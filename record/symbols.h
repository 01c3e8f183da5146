// symbols.h: a symbol table for `vbts record --range` and `vbts
// report`: address -> "symbol+offset", symbol -> address range, and the
// file bytes of the loadable segments (to find instruction lengths).  Reads
// ELF32 and ELF64 little-endian files (.symtab, else .dynsym) and Linux's
// System.map / kallsyms texts; every offset and size is bounds-checked, a
// malformed file is an InvalidArgument naming the field or line, never a crash.
#ifndef VBTS_VMM_SYMBOLS_H_
#define VBTS_VMM_SYMBOLS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "record/trace_format.h"

namespace vbts::record {

struct Symbol {
  uint64_t addr = 0;
  uint64_t size = 0;     // 0 for assembler labels
  std::string name;
  bool func = false;     // STT_FUNC (else STT_NOTYPE)
  bool global = false;
  uint64_t section_end = 0;  // end of the section the symbol is in
};

class SymbolTable {
 public:
  SymbolTable() = default;
  // Parses an ELF file's symbols (FUNC and NOTYPE symbols with a name,
  // defined in an allocated section) and PT_LOAD segments.  `name` is used
  // in error messages.
  static absl::StatusOr<SymbolTable> FromElf(absl::Span<const uint8_t> file, std::string_view name);
  // Parses a System.map (Linux's `nm` of vmlinux, which distributions ship
  // beside the kernel) or a copy of /proc/kallsyms: `ADDRESS TYPE NAME` lines
  // (kallsyms may add a tab and `[module]`).  Code symbols (types T, t, W,
  // w) are kept; without sizes, each runs to the next symbol of any type.
  // Lines with address 0 (kallsyms read without the right to see addresses)
  // are skipped.  InvalidArgument for a line of another shape, naming it.
  static absl::StatusOr<SymbolTable> FromSystemMap(std::string_view text, std::string_view name);
  // An ELF file (by its magic), else a System.map text.
  static absl::StatusOr<SymbolTable> Load(const std::string& path);
  // Several such files as one table (a guest kernel's symbols and a user
  // program's, say): every symbol and loadable segment of each; where two
  // name one address, the preference of one file decides (functions, then
  // globals, then the shorter name).  The first error, naming its file.
  static absl::StatusOr<SymbolTable> LoadAll(const std::vector<std::string>& paths);

  bool empty() const { return by_addr_.empty(); }
  size_t size() const { return all_.size(); }
  // Every kept symbol, by address.
  const std::vector<Symbol>& symbols() const { return all_; }
  // The symbol `addr` is in: inside a sized symbol, or at or after a label
  // (size 0) in the same section, before the next symbol.  nullptr if none.
  const Symbol* Find(uint64_t addr) const;
  // "name+0x1a", "name" at offset 0, or "0x<addr>" without a symbol.
  std::string Describe(uint64_t addr) const;
  // The function `addr` is in: the symbol's name without an assembler local
  // label suffix ("_start.loop" -> "_start"), or "0x<addr>" without a symbol.
  std::string FunctionOf(uint64_t addr) const;
  // A symbol by name (the first defined one).
  const Symbol* Lookup(std::string_view name) const;
  // The extent of a symbol: its size when it has one, else up to the next
  // symbol that is not one of its own local labels ("name.x"), within its
  // section.
  trace::AddressRange Extent(const Symbol& s) const;
  // Up to `max` file bytes of the image at linked address `addr` (empty when
  // no loadable segment holds it).
  absl::Span<const uint8_t> BytesAt(uint64_t addr, size_t max) const;

 private:
  // Sorts all_ and picks each address's preferred name (by_addr_).
  void Index();
  struct Segment {
    uint64_t vaddr = 0;
    std::vector<uint8_t> bytes;
  };
  std::vector<Symbol> all_;           // sorted by address, every kept symbol
  std::vector<size_t> by_addr_;       // one index into all_ per distinct address (the preferred name)
  std::vector<Segment> segments_;
};

// Parses a `--range` value: START:END (END exclusive), each a number
// (0x-hex or decimal), a symbol, or symbol+offset; or a single symbol, meaning
// its extent.  `symbols` may be null (numbers only).
absl::StatusOr<trace::AddressRange> ParseRange(std::string_view spec, const SymbolTable* symbols);

}  // namespace vbts::record

#endif  // VBTS_VMM_SYMBOLS_H_
