// symbols_fuzz.cc: libFuzzer target for the symbol files `vbts record
// --symbols` and `vbts report --symbols` read (record/symbols.h): the input is
// taken as an ELF file and as a System.map / kallsyms text.  Whatever either
// parser accepts is asked for names at the addresses the input names and
// around them, for the extent of its first symbols and for --range values
// built from them.  Checks: no crash; a parsed table answers every question;
// Describe names an address with the symbol Find returns.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "record/symbols.h"

namespace {

using vbts::record::SymbolTable;

void Ask(const SymbolTable& t, const uint8_t* data, size_t size) {
  for (size_t i = 0; i + 8 <= size && i < 512; i += 8) {
    uint64_t a = 0;
    for (int k = 0; k < 8; k++) a |= static_cast<uint64_t>(data[i + k]) << (8 * k);
    for (uint64_t addr : {a, a + 1, a - 1, a & ~uint64_t{0xFFF}}) {
      const vbts::record::Symbol* s = t.Find(addr);
      const std::string d = t.Describe(addr);
      if (s && d.compare(0, s->name.size(), s->name) != 0) __builtin_trap();
      (void)t.FunctionOf(addr);
      (void)t.BytesAt(addr, 15);
      if (s) {
        (void)t.Extent(*s);
        (void)vbts::record::ParseRange(s->name, &t);
        (void)vbts::record::ParseRange(s->name + "+0x10:" + s->name + "+0x20", &t);
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<SymbolTable> elf = SymbolTable::FromElf(absl::MakeConstSpan(data, size), "fuzz.elf");
  if (elf.ok()) Ask(*elf, data, size);
  absl::StatusOr<SymbolTable> map =
      SymbolTable::FromSystemMap(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.map");
  if (map.ok()) {
    Ask(*map, data, size);
    // The text's own addresses too: the first hex field of each line.
    std::string_view text(reinterpret_cast<const char*>(data), size);
    for (size_t at = 0, lines = 0; at < text.size() && lines < 64; lines++) {
      const size_t end = text.find('\n', at);
      const std::string_view line = text.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
      uint64_t a = 0;
      size_t k = 0;
      for (; k < line.size() && k < 16; k++) {
        const char c = line[k];
        const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (v < 0) break;
        a = (a << 4) | static_cast<uint64_t>(v);
      }
      if (const vbts::record::Symbol* s = map->Find(a); s && map->Describe(a).compare(0, s->name.size(), s->name) != 0)
        __builtin_trap();
      if (end == std::string_view::npos) break;
      at = end + 1;
    }
  }
  return 0;
}
