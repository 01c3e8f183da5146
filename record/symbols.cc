// symbols.cc: symbol tables for vbts record/report (record/symbols.h): ELF files, System.map texts.
// Field offsets: System V ABI gABI, "Object Files" (ELF header, section
// header, symbol table entry, program header), 32- and 64-bit layouts.
#include "record/symbols.h"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace vbts::record {
namespace {

constexpr uint32_t kShtSymtab = 2, kShtDynsym = 11;
constexpr uint64_t kShfAlloc = 2;
constexpr uint32_t kPtLoad = 1;
constexpr uint8_t kSttNotype = 0, kSttFunc = 2;
constexpr uint8_t kStbGlobal = 1, kStbWeak = 2;
constexpr uint16_t kShnLoreserve = 0xff00;
constexpr uint64_t kMaxSymbols = 10'000'000;

// Bounds-checked little-endian reads from the file.
struct View {
  absl::Span<const uint8_t> f;
  std::string_view name;
  bool ok(uint64_t off, uint64_t len) const { return off <= f.size() && len <= f.size() - off; }
  uint64_t Get(uint64_t off, int bytes) const {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= static_cast<uint64_t>(f[off + i]) << (8 * i);
    return v;
  }
  absl::Status Bad(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s", name, what));
  }
};

bool IsLocalLabelOf(const std::string& label, const std::string& parent) {
  return label.size() > parent.size() + 1 && label.compare(0, parent.size(), parent) == 0 &&
         label[parent.size()] == '.';
}

// Preference among symbols at one address: functions, then globals, then
// names without an assembler local-label dot, then the shorter name.
bool Better(const Symbol& a, const Symbol& b) {
  if (a.func != b.func) return a.func;
  if (a.global != b.global) return a.global;
  const bool ad = a.name.find('.', 1) != std::string::npos, bd = b.name.find('.', 1) != std::string::npos;
  if (ad != bd) return !ad;
  return a.name.size() < b.name.size();
}

}  // namespace

absl::StatusOr<SymbolTable> SymbolTable::FromElf(absl::Span<const uint8_t> file, std::string_view name) {
  View v{file, name};
  if (!v.ok(0, 52) || file[0] != 0x7f || file[1] != 'E' || file[2] != 'L' || file[3] != 'F')
    return v.Bad("not an ELF file");
  const bool is64 = file[4] == 2;
  if ((file[4] != 1 && file[4] != 2) || file[5] != 1) return v.Bad("not a little-endian ELF32/ELF64 file");
  if (is64 && !v.ok(0, 64)) return v.Bad("ELF header cut short");
  const uint64_t phoff = is64 ? v.Get(32, 8) : v.Get(28, 4);
  const uint64_t shoff = is64 ? v.Get(40, 8) : v.Get(32, 4);
  const uint64_t phentsize = v.Get(is64 ? 54 : 42, 2), phnum = v.Get(is64 ? 56 : 44, 2);
  const uint64_t shentsize = v.Get(is64 ? 58 : 46, 2), shnum = v.Get(is64 ? 60 : 48, 2);
  const uint64_t want_ph = is64 ? 56 : 32, want_sh = is64 ? 64 : 40, symsize = is64 ? 24 : 16;

  SymbolTable t;
  if (phnum) {
    if (phentsize < want_ph || !v.ok(phoff, phentsize * phnum)) return v.Bad("program headers outside the file");
    for (uint64_t i = 0; i < phnum; i++) {
      const uint64_t p = phoff + i * phentsize;
      if (v.Get(p, 4) != kPtLoad) continue;
      const uint64_t off = is64 ? v.Get(p + 8, 8) : v.Get(p + 4, 4);
      const uint64_t vaddr = is64 ? v.Get(p + 16, 8) : v.Get(p + 8, 4);
      const uint64_t filesz = is64 ? v.Get(p + 32, 8) : v.Get(p + 16, 4);
      if (filesz == 0) continue;
      if (!v.ok(off, filesz)) return v.Bad(absl::StrFormat("PT_LOAD %u: p_offset/p_filesz outside the file", i));
      t.segments_.push_back({vaddr, std::vector<uint8_t>(file.begin() + off, file.begin() + off + filesz)});
    }
  }
  if (shnum == 0) return t;  // stripped of section headers: no symbols
  if (shentsize < want_sh || !v.ok(shoff, shentsize * shnum)) return v.Bad("section headers outside the file");
  struct Sec {
    uint32_t type;
    uint64_t flags, addr, off, size, link, entsize;
  };
  std::vector<Sec> secs(shnum);
  for (uint64_t i = 0; i < shnum; i++) {
    const uint64_t s = shoff + i * shentsize;
    Sec& c = secs[i];
    c.type = static_cast<uint32_t>(v.Get(s + 4, 4));
    if (is64) {
      c.flags = v.Get(s + 8, 8), c.addr = v.Get(s + 16, 8), c.off = v.Get(s + 24, 8), c.size = v.Get(s + 32, 8);
      c.link = v.Get(s + 40, 4), c.entsize = v.Get(s + 56, 8);
    } else {
      c.flags = v.Get(s + 8, 4), c.addr = v.Get(s + 12, 4), c.off = v.Get(s + 16, 4), c.size = v.Get(s + 20, 4);
      c.link = v.Get(s + 24, 4), c.entsize = v.Get(s + 36, 4);
    }
  }
  const Sec* symtab = nullptr;
  for (const Sec& c : secs)
    if (c.type == kShtSymtab) symtab = &c;
  if (!symtab)
    for (const Sec& c : secs)
      if (c.type == kShtDynsym) symtab = &c;
  if (!symtab) return t;
  if (symtab->entsize != symsize) return v.Bad("symbol table entry size is not the ELF class's");
  if (!v.ok(symtab->off, symtab->size)) return v.Bad("symbol table outside the file");
  if (symtab->link >= shnum) return v.Bad("symbol table's string table index out of range");
  const Sec& strtab = secs[symtab->link];
  if (!v.ok(strtab.off, strtab.size)) return v.Bad("string table outside the file");
  const uint64_t n = symtab->size / symsize;
  if (n > kMaxSymbols) return v.Bad("more symbols than vbts reads");
  for (uint64_t i = 1; i < n; i++) {
    const uint64_t e = symtab->off + i * symsize;
    const uint64_t name_off = v.Get(e, 4);
    const uint8_t info = static_cast<uint8_t>(v.Get(e + (is64 ? 4 : 12), 1));
    const uint64_t shndx = v.Get(e + (is64 ? 6 : 14), 2);
    const uint64_t value = is64 ? v.Get(e + 8, 8) : v.Get(e + 4, 4);
    const uint64_t size = is64 ? v.Get(e + 16, 8) : v.Get(e + 8, 4);
    const uint8_t type = info & 0xF, bind = info >> 4;
    if ((type != kSttNotype && type != kSttFunc) || shndx == 0 || shndx >= kShnLoreserve || shndx >= shnum) continue;
    if (!(secs[shndx].flags & kShfAlloc)) continue;
    if (name_off >= strtab.size) return v.Bad(absl::StrFormat("symbol %u: name outside the string table", i));
    const char* s = reinterpret_cast<const char*>(file.data() + strtab.off + name_off);
    const size_t max = strtab.size - name_off;
    const size_t len = strnlen(s, max);
    if (len == max) return v.Bad(absl::StrFormat("symbol %u: name not terminated", i));
    if (len == 0) continue;
    Symbol sym;
    sym.addr = value;
    sym.size = size;
    sym.name.assign(s, len);
    sym.func = type == kSttFunc;
    sym.global = bind == kStbGlobal || bind == kStbWeak;
    sym.section_end = secs[shndx].addr + secs[shndx].size;
    if (sym.section_end < secs[shndx].addr) sym.section_end = ~0ull;
    t.all_.push_back(std::move(sym));
  }
  t.Index();
  return t;
}

void SymbolTable::Index() {
  std::stable_sort(all_.begin(), all_.end(), [](const Symbol& a, const Symbol& b) { return a.addr < b.addr; });
  by_addr_.clear();
  for (size_t i = 0; i < all_.size(); i++) {
    if (!by_addr_.empty() && all_[by_addr_.back()].addr == all_[i].addr) {
      if (Better(all_[i], all_[by_addr_.back()])) by_addr_.back() = i;
    } else {
      by_addr_.push_back(i);
    }
  }
}

absl::StatusOr<SymbolTable> SymbolTable::FromSystemMap(std::string_view text, std::string_view name) {
  struct Line {
    uint64_t addr;
    char type;
    std::string_view name;
  };
  std::vector<Line> lines;
  size_t line_no = 0, zero = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(at, end - at);
    at = end + 1;
    line_no++;
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (l.empty()) continue;
    // "ADDRESS TYPE NAME", kallsyms adding "\t[module]".
    const size_t sp1 = l.find(' '), sp2 = sp1 == std::string_view::npos ? sp1 : l.find(' ', sp1 + 1);
    uint64_t addr = 0;
    if (sp1 == 0 || sp1 == std::string_view::npos || sp2 != sp1 + 2 || sp1 > 16 ||
        !absl::SimpleHexAtoi(absl::string_view(l.data(), sp1), &addr))
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: line %u is not `ADDRESS TYPE NAME`: neither an ELF file nor a System.map or /proc/kallsyms text",
          name, line_no));
    std::string_view sym = l.substr(sp2 + 1);
    sym = sym.substr(0, sym.find_first_of("\t "));
    if (sym.empty())
      return absl::InvalidArgumentError(absl::StrFormat("%s: line %u has no symbol name", name, line_no));
    if (lines.size() >= kMaxSymbols) return absl::InvalidArgumentError(absl::StrFormat("%s: more symbols than vbts reads", name));
    if (addr == 0) {
      zero++;  // kallsyms read without the right to see addresses
      continue;
    }
    lines.push_back({addr, l[sp1 + 1], sym});
  }
  if (lines.empty())
    return absl::InvalidArgumentError(
        zero ? absl::StrFormat("%s: every address is 0 (/proc/kallsyms read without CAP_SYSLOG?)", name)
             : absl::StrFormat("%s: no symbols", name));
  std::stable_sort(lines.begin(), lines.end(), [](const Line& a, const Line& b) { return a.addr < b.addr; });
  // Code symbols (T, t, W, w) are kept, as labels: each runs to the next
  // symbol of any kind, which bounds it (System.map has no sizes).
  // From the last line back, `next` is the address of the nearest later line
  // with a greater one (lines at one address share it): one pass.
  SymbolTable t;
  uint64_t next = ~0ull;
  for (size_t i = lines.size(); i-- > 0;) {
    if (i + 1 < lines.size() && lines[i + 1].addr > lines[i].addr) next = lines[i + 1].addr;
    const char type = lines[i].type;
    if (type != 'T' && type != 't' && type != 'W' && type != 'w') continue;
    Symbol sym;
    sym.addr = lines[i].addr;
    sym.name = std::string(lines[i].name);
    sym.func = true;
    sym.global = type == 'T' || type == 'W';
    sym.section_end = next;
    t.all_.push_back(std::move(sym));
  }
  std::reverse(t.all_.begin(), t.all_.end());  // the text's order (Index keeps it among equals)
  if (t.all_.empty()) return absl::InvalidArgumentError(absl::StrFormat("%s: no code symbols (types T, t, W, w)", name));
  t.Index();
  return t;
}

absl::StatusOr<SymbolTable> SymbolTable::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrFormat("%s: cannot open", path));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() >= 4 && bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' && bytes[3] == 'F')
    return FromElf(bytes, path);
  return FromSystemMap(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
}

absl::StatusOr<SymbolTable> SymbolTable::LoadAll(const std::vector<std::string>& paths) {
  SymbolTable all;
  for (const std::string& path : paths) {
    absl::StatusOr<SymbolTable> t = Load(path);
    if (!t.ok()) return t.status();
    if (all.all_.size() + t->all_.size() > kMaxSymbols)
      return absl::InvalidArgumentError(absl::StrFormat("%s: more symbols than vbts reads", path));
    for (Symbol& s : t->all_) all.all_.push_back(std::move(s));
    for (Segment& g : t->segments_) all.segments_.push_back(std::move(g));
  }
  all.Index();
  return all;
}

const Symbol* SymbolTable::Find(uint64_t addr) const {
  auto it = std::upper_bound(by_addr_.begin(), by_addr_.end(), addr,
                             [this](uint64_t a, size_t i) { return a < all_[i].addr; });
  if (it == by_addr_.begin()) return nullptr;
  const Symbol& s = all_[*(it - 1)];
  if (s.size > 0) {
    if (addr - s.addr < s.size) return &s;
    // A sized symbol that ends before addr: a label before it may still hold
    // addr (rare); treat the address as unnamed.
    return nullptr;
  }
  return addr < s.section_end ? &s : nullptr;
}

std::string SymbolTable::Describe(uint64_t addr) const {
  const Symbol* s = Find(addr);
  if (!s) return absl::StrFormat("0x%x", addr);
  if (addr == s->addr) return s->name;
  return absl::StrFormat("%s+0x%x", s->name, addr - s->addr);
}

std::string SymbolTable::FunctionOf(uint64_t addr) const {
  const Symbol* s = Find(addr);
  if (!s) return absl::StrFormat("0x%x", addr);
  const size_t dot = s->name.find('.', 1);
  return dot == std::string::npos ? s->name : s->name.substr(0, dot);
}

const Symbol* SymbolTable::Lookup(std::string_view name) const {
  for (const Symbol& s : all_)
    if (s.name == name) return &s;
  return nullptr;
}

trace::AddressRange SymbolTable::Extent(const Symbol& s) const {
  if (s.size > 0) return {s.addr, s.addr + s.size};
  // all_ is sorted by address (Index): from the first symbol past s, up to
  // the section's end.
  uint64_t end = s.section_end;
  auto it = std::upper_bound(all_.begin(), all_.end(), s.addr,
                             [](uint64_t a, const Symbol& o) { return a < o.addr; });
  for (; it != all_.end() && it->addr < end; ++it) {
    if (IsLocalLabelOf(it->name, s.name)) continue;
    end = it->addr;
    break;
  }
  return {s.addr, end};
}

absl::Span<const uint8_t> SymbolTable::BytesAt(uint64_t addr, size_t max) const {
  for (const Segment& g : segments_) {
    if (addr - g.vaddr < g.bytes.size()) {
      const size_t off = static_cast<size_t>(addr - g.vaddr);
      return absl::MakeConstSpan(g.bytes).subspan(off, std::min(max, g.bytes.size() - off));
    }
  }
  return {};
}

namespace {

absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }
bool StartsWithHex(std::string_view s) { return s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'); }
bool ParseNumber(std::string_view s, uint64_t* v) {
  return StartsWithHex(s) ? absl::SimpleHexAtoi(Av(s.substr(2)), v) : absl::SimpleAtoi(Av(s), v);
}

absl::StatusOr<uint64_t> ParseAddress(std::string_view spec, std::string_view text, const SymbolTable* symbols) {
  uint64_t v;
  if (!text.empty() && text[0] >= '0' && text[0] <= '9') {
    if (ParseNumber(text, &v)) return v;
  } else if (!text.empty()) {
    std::string_view name = text;
    uint64_t off = 0;
    if (size_t plus = text.rfind('+'); plus != std::string_view::npos) {
      name = text.substr(0, plus);
      std::string_view o = text.substr(plus + 1);
      if (!ParseNumber(o, &off))
        return absl::InvalidArgumentError(absl::StrFormat("--range=%s: bad offset '%s'", spec, o));
    }
    if (!symbols)
      return absl::InvalidArgumentError(
          absl::StrFormat("--range=%s: '%s' is not a number and there is no symbol table (--symbols=ELF)", spec, name));
    const Symbol* s = symbols->Lookup(name);
    if (!s) return absl::InvalidArgumentError(absl::StrFormat("--range=%s: no symbol '%s'", spec, name));
    return s->addr + off;
  }
  return absl::InvalidArgumentError(absl::StrFormat("--range=%s: '%s' is not an address or symbol", spec, text));
}

}  // namespace

absl::StatusOr<trace::AddressRange> ParseRange(std::string_view spec, const SymbolTable* symbols) {
  trace::AddressRange r;
  const size_t colon = spec.find(':');
  if (colon == std::string_view::npos) {
    if (!symbols)
      return absl::InvalidArgumentError(
          absl::StrFormat("--range=%s: a single symbol needs a symbol table (--symbols=ELF)", spec));
    const Symbol* s = symbols->Lookup(spec);
    if (!s) return absl::InvalidArgumentError(absl::StrFormat("--range=%s: no symbol '%s' (or use START:END)", spec, spec));
    r = symbols->Extent(*s);
  } else {
    absl::StatusOr<uint64_t> a = ParseAddress(spec, spec.substr(0, colon), symbols);
    if (!a.ok()) return a.status();
    absl::StatusOr<uint64_t> b = ParseAddress(spec, spec.substr(colon + 1), symbols);
    if (!b.ok()) return b.status();
    r = {*a, *b};
  }
  if (r.end <= r.start)
    return absl::InvalidArgumentError(
        absl::StrFormat("--range=%s: empty range [0x%x, 0x%x) (END is exclusive)", spec, r.start, r.end));
  return r;
}

}  // namespace vbts::record
