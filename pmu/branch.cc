// branch.cc: names and classes of control transfers (pmu/branch.h).
#include "pmu/branch.h"

namespace vbts::pmu {

const char* BranchKindName(BranchKind k) {
  switch (k) {
    case BranchKind::kNone: return "none";
    case BranchKind::kJcc: return "jcc";
    case BranchKind::kJmp: return "jmp";
    case BranchKind::kIndJmp: return "ind-jmp";
    case BranchKind::kCall: return "call";
    case BranchKind::kIndCall: return "ind-call";
    case BranchKind::kRet: return "ret";
    case BranchKind::kFarJmp: return "far-jmp";
    case BranchKind::kFarCall: return "far-call";
    case BranchKind::kFarRet: return "far-ret";
    case BranchKind::kIret: return "iret";
    case BranchKind::kSoftInt: return "int";
    case BranchKind::kSyscall: return "syscall";
    case BranchKind::kSysret: return "sysret";
    case BranchKind::kSysenter: return "sysenter";
    case BranchKind::kSysexit: return "sysexit";
    case BranchKind::kException: return "exception";
    case BranchKind::kInterrupt: return "interrupt";
    case BranchKind::kNmi: return "nmi";
  }
  return "?";
}

bool IsFarBranch(BranchKind k) {
  switch (k) {
    case BranchKind::kFarJmp:
    case BranchKind::kFarCall:
    case BranchKind::kFarRet:
    case BranchKind::kIret:
    case BranchKind::kSoftInt:
    case BranchKind::kSyscall:
    case BranchKind::kSysret:
    case BranchKind::kSysenter:
    case BranchKind::kSysexit:
    case BranchKind::kException:
    case BranchKind::kInterrupt:
    case BranchKind::kNmi:
      return true;
    default:
      return false;
  }
}

}  // namespace vbts::pmu
