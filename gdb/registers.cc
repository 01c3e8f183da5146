// registers.cc: the register layout GDB sees (gdb/registers.h).
//
// One table per architecture drives everything: the target description,
// the `g`/`G` packets (the registers in table order, each little-endian in
// its bitsize) and the numbers of `p`/`P` (the table index; GDB numbers the
// registers of a description in document order when no `regnum` is given,
// GDB manual "Target Description Format", "Registers").  The core, sse and
// segments features copy the register names, sizes and types of GDB's
// gdb/features/i386/{32,64}bit-{core,sse,segments}.xml, which GDB's i386 and
// amd64 code validate by name.
#include "gdb/registers.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gdb/rsp.h"

namespace vbts::gdb {
namespace {

// Where a register lives in Registers.
enum class Field {
  kGpr,      // st.gpr[index]
  kRip,
  kEflags,
  kSeg,      // index: 0 cs, 1 ss, 2 ds, 3 es, 4 fs, 5 gs (selector only)
  kSt,       // fpu.st[index], stack order
  kFctrl,
  kFstat,
  kFtag,     // full tag word, derived from the abridged one
  kFpuZero,  // fiseg/fioff/foseg/fooff/fop: vbts does not keep them
  kXmm,      // fpu.xmm[index]
  kMxcsr,
  kFsBase,
  kGsBase,
  kKernelGsBase,
  kCr0,
  kCr2,
  kCr3,
  kCr4,
  kCr8,
  kEfer,
};

struct Reg {
  std::string name;
  int bits;
  std::string type;
  std::string group;  // empty: none
  Field field;
  int index = 0;
};

struct Feature {
  std::string name;
  std::string types;  // type definitions, XML
  std::vector<Reg> regs;
};

struct Layout {
  std::vector<Feature> features;
  std::vector<const Reg*> regs;  // flattened, register number order
  size_t g_bytes = 0;
};

// The i386_eflags flags type of GDB's {32,64}bit-core.xml.
constexpr char kEflagsType[] =
    "<flags id=\"i386_eflags\" size=\"4\">"
    "<field name=\"CF\" start=\"0\" end=\"0\"/>"
    "<field name=\"\" start=\"1\" end=\"1\"/>"
    "<field name=\"PF\" start=\"2\" end=\"2\"/>"
    "<field name=\"AF\" start=\"4\" end=\"4\"/>"
    "<field name=\"ZF\" start=\"6\" end=\"6\"/>"
    "<field name=\"SF\" start=\"7\" end=\"7\"/>"
    "<field name=\"TF\" start=\"8\" end=\"8\"/>"
    "<field name=\"IF\" start=\"9\" end=\"9\"/>"
    "<field name=\"DF\" start=\"10\" end=\"10\"/>"
    "<field name=\"OF\" start=\"11\" end=\"11\"/>"
    "<field name=\"NT\" start=\"14\" end=\"14\"/>"
    "<field name=\"RF\" start=\"16\" end=\"16\"/>"
    "<field name=\"VM\" start=\"17\" end=\"17\"/>"
    "<field name=\"AC\" start=\"18\" end=\"18\"/>"
    "<field name=\"VIF\" start=\"19\" end=\"19\"/>"
    "<field name=\"VIP\" start=\"20\" end=\"20\"/>"
    "<field name=\"ID\" start=\"21\" end=\"21\"/>"
    "</flags>";

// The vec128 union and i386_mxcsr flags of GDB's {32,64}bit-sse.xml (GDB
// 12+ adds the bfloat16 and half views; GDB 13.1 knows both types).
constexpr char kSseTypes[] =
    "<vector id=\"v8bf16\" type=\"bfloat16\" count=\"8\"/>"
    "<vector id=\"v8h\" type=\"ieee_half\" count=\"8\"/>"
    "<vector id=\"v4f\" type=\"ieee_single\" count=\"4\"/>"
    "<vector id=\"v2d\" type=\"ieee_double\" count=\"2\"/>"
    "<vector id=\"v16i8\" type=\"int8\" count=\"16\"/>"
    "<vector id=\"v8i16\" type=\"int16\" count=\"8\"/>"
    "<vector id=\"v4i32\" type=\"int32\" count=\"4\"/>"
    "<vector id=\"v2i64\" type=\"int64\" count=\"2\"/>"
    "<union id=\"vec128\">"
    "<field name=\"v8_bfloat16\" type=\"v8bf16\"/>"
    "<field name=\"v8_half\" type=\"v8h\"/>"
    "<field name=\"v4_float\" type=\"v4f\"/>"
    "<field name=\"v2_double\" type=\"v2d\"/>"
    "<field name=\"v16_int8\" type=\"v16i8\"/>"
    "<field name=\"v8_int16\" type=\"v8i16\"/>"
    "<field name=\"v4_int32\" type=\"v4i32\"/>"
    "<field name=\"v2_int64\" type=\"v2i64\"/>"
    "<field name=\"uint128\" type=\"uint128\"/>"
    "</union>"
    "<flags id=\"i386_mxcsr\" size=\"4\">"
    "<field name=\"IE\" start=\"0\" end=\"0\"/>"
    "<field name=\"DE\" start=\"1\" end=\"1\"/>"
    "<field name=\"ZE\" start=\"2\" end=\"2\"/>"
    "<field name=\"OE\" start=\"3\" end=\"3\"/>"
    "<field name=\"UE\" start=\"4\" end=\"4\"/>"
    "<field name=\"PE\" start=\"5\" end=\"5\"/>"
    "<field name=\"DAZ\" start=\"6\" end=\"6\"/>"
    "<field name=\"IM\" start=\"7\" end=\"7\"/>"
    "<field name=\"DM\" start=\"8\" end=\"8\"/>"
    "<field name=\"ZM\" start=\"9\" end=\"9\"/>"
    "<field name=\"OM\" start=\"10\" end=\"10\"/>"
    "<field name=\"UM\" start=\"11\" end=\"11\"/>"
    "<field name=\"PM\" start=\"12\" end=\"12\"/>"
    "<field name=\"FZ\" start=\"15\" end=\"15\"/>"
    "</flags>";

Layout MakeLayout(Arch arch) {
  const bool x64 = arch == Arch::kX86_64;
  const int w = x64 ? 64 : 32;
  Layout l;

  Feature core{"org.gnu.gdb.i386.core", kEflagsType, {}};
  // GDB's order (rax rbx rcx rdx ...) differs from the encoding order of
  // vcpu::Gpr (rax rcx rdx rbx ...), hence the explicit indices.
  if (x64) {
    const struct { const char* name; int gpr; const char* type; } gprs[] = {
        {"rax", vcpu::kRax, "int64"}, {"rbx", vcpu::kRbx, "int64"}, {"rcx", vcpu::kRcx, "int64"},
        {"rdx", vcpu::kRdx, "int64"}, {"rsi", vcpu::kRsi, "int64"}, {"rdi", vcpu::kRdi, "int64"},
        {"rbp", vcpu::kRbp, "data_ptr"}, {"rsp", vcpu::kRsp, "data_ptr"},
    };
    for (const auto& g : gprs) core.regs.push_back({g.name, 64, g.type, "", Field::kGpr, g.gpr});
    for (int i = 8; i < 16; i++) core.regs.push_back({absl::StrCat("r", i), 64, "int64", "", Field::kGpr, i});
    core.regs.push_back({"rip", 64, "code_ptr", "", Field::kRip});
  } else {
    // 32bit-core.xml keeps the encoding order.
    const struct { const char* name; int gpr; const char* type; } gprs[] = {
        {"eax", vcpu::kRax, "int32"}, {"ecx", vcpu::kRcx, "int32"}, {"edx", vcpu::kRdx, "int32"},
        {"ebx", vcpu::kRbx, "int32"}, {"esp", vcpu::kRsp, "data_ptr"}, {"ebp", vcpu::kRbp, "data_ptr"},
        {"esi", vcpu::kRsi, "int32"}, {"edi", vcpu::kRdi, "int32"},
    };
    for (const auto& g : gprs) core.regs.push_back({g.name, 32, g.type, "", Field::kGpr, g.gpr});
    core.regs.push_back({"eip", 32, "code_ptr", "", Field::kRip});
  }
  core.regs.push_back({"eflags", 32, "i386_eflags", "", Field::kEflags});
  const char* segs[] = {"cs", "ss", "ds", "es", "fs", "gs"};
  for (int i = 0; i < 6; i++) core.regs.push_back({segs[i], 32, "int32", "", Field::kSeg, i});
  for (int i = 0; i < 8; i++) core.regs.push_back({absl::StrCat("st", i), 80, "i387_ext", "", Field::kSt, i});
  core.regs.push_back({"fctrl", 32, "int", "float", Field::kFctrl});
  core.regs.push_back({"fstat", 32, "int", "float", Field::kFstat});
  core.regs.push_back({"ftag", 32, "int", "float", Field::kFtag});
  for (const char* n : {"fiseg", "fioff", "foseg", "fooff", "fop"})
    core.regs.push_back({n, 32, "int", "float", Field::kFpuZero});
  l.features.push_back(std::move(core));

  Feature sse{"org.gnu.gdb.i386.sse", kSseTypes, {}};
  for (int i = 0; i < (x64 ? 16 : 8); i++)
    sse.regs.push_back({absl::StrCat("xmm", i), 128, "vec128", "", Field::kXmm, i});
  sse.regs.push_back({"mxcsr", 32, "i386_mxcsr", "vector", Field::kMxcsr});
  l.features.push_back(std::move(sse));

  Feature seg{"org.gnu.gdb.i386.segments", "", {}};
  seg.regs.push_back({"fs_base", w, "int", "", Field::kFsBase});
  seg.regs.push_back({"gs_base", w, "int", "", Field::kGsBase});
  l.features.push_back(std::move(seg));

  // What QEMU's x86 gdbstub adds beyond GDB's own features; GDB shows an
  // unknown feature's registers under their group (`info registers system`).
  Feature sys{"org.vbts.x86.system", "", {}};
  if (x64) sys.regs.push_back({"k_gs_base", 64, "int", "system", Field::kKernelGsBase});
  sys.regs.push_back({"cr0", w, "int", "system", Field::kCr0});
  sys.regs.push_back({"cr2", w, "int", "system", Field::kCr2});
  sys.regs.push_back({"cr3", w, "int", "system", Field::kCr3});
  sys.regs.push_back({"cr4", w, "int", "system", Field::kCr4});
  if (x64) sys.regs.push_back({"cr8", 64, "int", "system", Field::kCr8});
  sys.regs.push_back({"efer", w, "int", "system", Field::kEfer});
  l.features.push_back(std::move(sys));

  for (const Feature& f : l.features)
    for (const Reg& r : f.regs) {
      l.regs.push_back(&r);
      l.g_bytes += r.bits / 8;
    }
  return l;
}

const Layout& GetLayout(Arch arch) {
  // Built once; never destroyed (no exit-time destructor ordering issues).
  static const Layout* const i386 = new Layout(MakeLayout(Arch::kI386));
  static const Layout* const x64 = new Layout(MakeLayout(Arch::kX86_64));
  return arch == Arch::kX86_64 ? *x64 : *i386;
}

template <typename State>  // vcpu::CpuState, const or not
auto& SegmentOf(State& st, int i) {
  switch (i) {
    case 0: return st.cs;
    case 1: return st.ss;
    case 2: return st.ds;
    case 3: return st.es;
    case 4: return st.fs;
    default: return st.gs;
  }
}

// x87 tag of one 80-bit register that is not empty (SDM vol. 1 8.1.7,
// figure 8-7): 0 valid, 1 zero, 2 special (NaN, infinity, denormal,
// unnormal).  The tag word is what FSTENV would store.
int ClassifyX87(const uint8_t* v) {
  uint64_t mantissa;
  std::memcpy(&mantissa, v, 8);
  const int exponent = (v[8] | v[9] << 8) & 0x7fff;
  if (exponent == 0x7fff) return 2;
  if (exponent == 0) return mantissa == 0 ? 1 : 2;
  return (mantissa >> 63) ? 0 : 2;  // integer bit clear: unnormal
}

uint16_t FullTagWord(const vcpu::FpuState& f) {
  const int top = (f.fsw >> 11) & 7;
  uint16_t tags = 0;
  for (int phys = 0; phys < 8; phys++) {
    int tag = 3;  // empty
    if (f.ftw & (1 << phys)) tag = ClassifyX87(f.st[(phys - top) & 7]);
    tags = static_cast<uint16_t>(tags | tag << (2 * phys));
  }
  return tags;
}

// The register's bytes (little-endian, bits/8 of them) appended to `out`.
void Get(const Reg& r, const Registers& regs, std::string& out) {
  const vcpu::CpuState& st = regs.st;
  const vcpu::FpuState& f = regs.fpu;
  const size_t n = r.bits / 8;
  if (r.field == Field::kSt) {
    out.append(reinterpret_cast<const char*>(f.st[r.index]), 10);
    return;
  }
  if (r.field == Field::kXmm) {
    out.append(reinterpret_cast<const char*>(f.xmm[r.index]), 16);
    return;
  }
  uint64_t v = 0;
  switch (r.field) {
    case Field::kGpr: v = st.gpr[r.index]; break;
    case Field::kRip: v = st.rip; break;
    case Field::kEflags: v = st.rflags; break;
    case Field::kSeg: v = SegmentOf(st, r.index).selector; break;
    case Field::kFctrl: v = f.fcw; break;
    case Field::kFstat: v = f.fsw; break;
    case Field::kFtag: v = FullTagWord(f); break;
    case Field::kFpuZero: v = 0; break;
    case Field::kMxcsr: v = f.mxcsr; break;
    case Field::kFsBase: v = st.fs.base; break;
    case Field::kGsBase: v = st.gs.base; break;
    case Field::kKernelGsBase: v = st.kernel_gs_base; break;
    case Field::kCr0: v = st.cr0; break;
    case Field::kCr2: v = st.cr2; break;
    case Field::kCr3: v = st.cr3; break;
    case Field::kCr4: v = st.cr4; break;
    case Field::kCr8: v = st.cr8; break;
    case Field::kEfer: v = st.efer; break;
    case Field::kSt:
    case Field::kXmm: break;
  }
  for (size_t i = 0; i < n; i++) out.push_back(static_cast<char>(v >> (8 * i)));
}

// Stores `bytes` (exactly bits/8 of them) into the register.  Values
// narrower than their field are zero-extended (32-bit registers of i386
// into the 64-bit CpuState fields); selectors change alone, the Target
// reloads the hidden parts.
void Set(const Reg& r, absl::string_view bytes, Registers& regs) {
  vcpu::CpuState& st = regs.st;
  vcpu::FpuState& f = regs.fpu;
  if (r.field == Field::kSt) {
    std::memcpy(f.st[r.index], bytes.data(), 10);
    return;
  }
  if (r.field == Field::kXmm) {
    std::memcpy(f.xmm[r.index], bytes.data(), 16);
    return;
  }
  uint64_t v = 0;
  for (size_t i = 0; i < bytes.size(); i++) v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  switch (r.field) {
    case Field::kGpr: st.gpr[r.index] = v; break;
    case Field::kRip: st.rip = v; break;
    case Field::kEflags: st.rflags = v; break;
    case Field::kSeg: SegmentOf(st, r.index).selector = static_cast<uint16_t>(v); break;
    case Field::kFctrl: f.fcw = static_cast<uint16_t>(v); break;
    case Field::kFstat: f.fsw = static_cast<uint16_t>(v); break;
    case Field::kFtag: {
      // The abridged tag word keeps only "empty or not" per physical
      // register (FXSAVE's format): tag 3 is empty, anything else is not.
      uint8_t ftw = 0;
      for (int phys = 0; phys < 8; phys++)
        if (((v >> (2 * phys)) & 3) != 3) ftw = static_cast<uint8_t>(ftw | 1 << phys);
      f.ftw = ftw;
      break;
    }
    case Field::kFpuZero: break;  // not kept by vbts: writes are dropped
    case Field::kMxcsr: f.mxcsr = static_cast<uint32_t>(v); break;
    case Field::kFsBase: st.fs.base = v; break;
    case Field::kGsBase: st.gs.base = v; break;
    case Field::kKernelGsBase: st.kernel_gs_base = v; break;
    case Field::kCr0: st.cr0 = v; break;
    case Field::kCr2: st.cr2 = v; break;
    case Field::kCr3: st.cr3 = v; break;
    case Field::kCr4: st.cr4 = v; break;
    case Field::kCr8: st.cr8 = v; break;
    case Field::kEfer: st.efer = v; break;
    case Field::kSt:
    case Field::kXmm: break;
  }
}

}  // namespace

const char* ArchName(Arch a) { return a == Arch::kX86_64 ? "i386:x86-64" : "i386"; }

std::string TargetXml(Arch arch) {
  const Layout& l = GetLayout(arch);
  std::string xml = absl::StrCat(
      "<?xml version=\"1.0\"?><!DOCTYPE target SYSTEM \"gdb-target.dtd\"><target version=\"1.0\">"
      "<architecture>",
      ArchName(arch), "</architecture>");
  // Without an OS ABI GDB guesses one (GNU/Linux for a Debian build when the
  // ELF has no ABI note), and GDB 13.1's i386 GNU/Linux ABI does not number
  // fs_base/gs_base: it aborts (internal error in tdesc_use_registers).  A
  // bare-metal guest has no OS ABI anyway.
  xml += "<osabi>none</osabi>";
  for (const Feature& f : l.features) {
    absl::StrAppend(&xml, "<feature name=\"", f.name, "\">", f.types);
    for (const Reg& r : f.regs) {
      absl::StrAppend(&xml, "<reg name=\"", r.name, "\" bitsize=\"", r.bits, "\" type=\"", r.type, "\"");
      if (!r.group.empty()) absl::StrAppend(&xml, " group=\"", r.group, "\"");
      xml += "/>";
    }
    xml += "</feature>";
  }
  xml += "</target>";
  return xml;
}

int RegisterCount(Arch arch) { return static_cast<int>(GetLayout(arch).regs.size()); }

std::optional<int> RegisterNumber(Arch arch, absl::string_view name) {
  const Layout& l = GetLayout(arch);
  for (size_t i = 0; i < l.regs.size(); i++)
    if (l.regs[i]->name == name) return static_cast<int>(i);
  return std::nullopt;
}

std::string EncodeRegisters(Arch arch, const Registers& regs) {
  const Layout& l = GetLayout(arch);
  std::string bytes;
  bytes.reserve(l.g_bytes);
  for (const Reg* r : l.regs) Get(*r, regs, bytes);
  return ToHex(bytes);
}

std::optional<std::string> EncodeRegister(Arch arch, int regno, const Registers& regs) {
  const Layout& l = GetLayout(arch);
  if (regno < 0 || static_cast<size_t>(regno) >= l.regs.size()) return std::nullopt;
  std::string bytes;
  Get(*l.regs[regno], regs, bytes);
  return ToHex(bytes);
}

absl::Status DecodeRegisters(Arch arch, absl::string_view hex, Registers& regs) {
  const Layout& l = GetLayout(arch);
  if (hex.size() != 2 * l.g_bytes)
    return absl::InvalidArgumentError(absl::StrFormat("register block of %d hex digits, %s wants %d", hex.size(),
                                                      ArchName(arch), 2 * l.g_bytes));
  std::optional<std::string> bytes = FromHex(hex);
  if (!bytes) return absl::InvalidArgumentError("register block is not hex");
  // Decode into a copy so that a failure leaves `regs` untouched.
  Registers out = regs;
  absl::string_view rest = *bytes;
  for (const Reg* r : l.regs) {
    const size_t n = r->bits / 8;
    Set(*r, rest.substr(0, n), out);
    rest.remove_prefix(n);
  }
  regs = out;
  return absl::OkStatus();
}

absl::Status DecodeRegister(Arch arch, int regno, absl::string_view hex, Registers& regs) {
  const Layout& l = GetLayout(arch);
  if (regno < 0 || static_cast<size_t>(regno) >= l.regs.size())
    return absl::InvalidArgumentError(absl::StrFormat("no register %d in the %s description", regno, ArchName(arch)));
  const Reg& r = *l.regs[regno];
  if (hex.size() != static_cast<size_t>(r.bits / 4))
    return absl::InvalidArgumentError(
        absl::StrFormat("register %s: %d hex digits, wants %d", r.name, hex.size(), r.bits / 4));
  std::optional<std::string> bytes = FromHex(hex);
  if (!bytes) return absl::InvalidArgumentError(absl::StrFormat("register %s: value is not hex", r.name));
  Set(r, *bytes, regs);
  return absl::OkStatus();
}

}  // namespace vbts::gdb
