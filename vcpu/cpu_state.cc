// cpu_state.cc: mode/CPL derivation and human-readable dumps of CpuState.
#include "vcpu/cpu_state.h"

#include "absl/strings/str_format.h"

namespace vbts::vcpu {

const char* CpuModeName(CpuMode m) {
  switch (m) {
    case CpuMode::kReal: return "real";
    case CpuMode::kVirtual8086: return "v86";
    case CpuMode::kProtected16: return "pm16";
    case CpuMode::kProtected32: return "pm32";
    case CpuMode::kCompat16: return "compat16";
    case CpuMode::kCompat32: return "compat32";
    case CpuMode::kLong64: return "lm64";
  }
  return "?";
}

std::string CpuState::Describe() const {
  CpuMode m = mode();
  if (m == CpuMode::kLong64)
    return absl::StrFormat("%s CPL%d CS:RIP=%04x:%016x", CpuModeName(m), cpl(), cs.selector, rip);
  return absl::StrFormat("%s CPL%d CS:EIP=%04x:%08x", CpuModeName(m), cpl(), cs.selector, rip);
}

static std::string SegLine(const char* name, const Segment& s) {
  return absl::StrFormat("%-3s sel=%04x base=%016x limit=%08x type=%x s=%d dpl=%d p=%d db=%d l=%d g=%d%s\n", name,
                         s.selector, s.base, s.limit, s.type, s.s, s.dpl, s.present, s.db, s.l, s.g,
                         s.unusable ? " unusable" : "");
}

std::string CpuState::Dump() const {
  static const char* kNames[16] = {"rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi",
                                   "r8",  "r9",  "r10", "r11", "r12", "r13", "r14", "r15"};
  std::string out;
  for (int i = 0; i < 16; i++)
    absl::StrAppendFormat(&out, "%-3s=%016x%s", kNames[i], gpr[i], (i % 4 == 3) ? "\n" : "  ");
  absl::StrAppendFormat(&out, "rip=%016x  rflags=%016x  mode=%s cpl=%d\n", rip, rflags, CpuModeName(mode()), cpl());
  out += SegLine("cs", cs) + SegLine("ss", ss) + SegLine("ds", ds) + SegLine("es", es) + SegLine("fs", fs) +
         SegLine("gs", gs) + SegLine("tr", tr) + SegLine("ldt", ldtr);
  absl::StrAppendFormat(&out, "gdt=%016x/%04x  idt=%016x/%04x\n", gdtr.base, gdtr.limit, idtr.base, idtr.limit);
  absl::StrAppendFormat(&out, "cr0=%016x cr2=%016x cr3=%016x cr4=%016x efer=%016x\n", cr0, cr2, cr3, cr4, efer);
  return out;
}

}  // namespace vbts::vcpu
