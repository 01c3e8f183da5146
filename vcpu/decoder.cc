// decoder.cc: Zydis-backed decoding of one instruction into DecodedInsn.
#include "vcpu/decoder.h"

#include <Zydis/Zydis.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "pmu/paging.h"
#include "base/status_macros.h"

namespace vbts::vcpu {
namespace {

ZydisMachineMode ZydisModeOf(CpuMode m) {
  switch (m) {
    case CpuMode::kReal: return ZYDIS_MACHINE_MODE_REAL_16;
    case CpuMode::kVirtual8086: return ZYDIS_MACHINE_MODE_LEGACY_16;
    case CpuMode::kProtected16: return ZYDIS_MACHINE_MODE_LEGACY_16;
    case CpuMode::kProtected32: return ZYDIS_MACHINE_MODE_LEGACY_32;
    case CpuMode::kCompat16: return ZYDIS_MACHINE_MODE_LONG_COMPAT_16;
    case CpuMode::kCompat32: return ZYDIS_MACHINE_MODE_LONG_COMPAT_32;
    case CpuMode::kLong64: return ZYDIS_MACHINE_MODE_LONG_64;
  }
  return ZYDIS_MACHINE_MODE_LEGACY_32;
}

int GprOf(ZydisRegister r) {
  if (r == ZYDIS_REGISTER_NONE) return -1;
  if (r == ZYDIS_REGISTER_RIP || r == ZYDIS_REGISTER_EIP || r == ZYDIS_REGISTER_IP) return kRipBase;
  ZydisRegister big = ZydisRegisterGetLargestEnclosing(ZYDIS_MACHINE_MODE_LONG_64, r);
  if (big >= ZYDIS_REGISTER_RAX && big <= ZYDIS_REGISTER_R15) return big - ZYDIS_REGISTER_RAX;
  return -1;
}

// A Zydis memory operand as vbts's MemOperand.
MemOperand MemOf(const ZydisDecodedOperand& op) {
  MemOperand m;
  if (op.mem.segment >= ZYDIS_REGISTER_ES && op.mem.segment <= ZYDIS_REGISTER_GS)
    m.seg = static_cast<SegReg>(op.mem.segment - ZYDIS_REGISTER_ES);
  m.base = GprOf(op.mem.base);
  m.index = GprOf(op.mem.index);
  m.scale = op.mem.scale ? op.mem.scale : 1;
  m.disp = op.mem.disp.has_displacement ? op.mem.disp.value : 0;
  m.size_bits = op.size;
  return m;
}

std::string Hex(absl::Span<const uint8_t> b) {
  std::string s;
  for (uint8_t x : b) absl::StrAppendFormat(&s, "%s%02x", s.empty() ? "" : " ", x);
  return s;
}

// Fills the tracing classification of `d` (see DecodedInsn::branch).
// DecodedInsn::sse_aligned_m128 (decoder.h says which rule and where from).
bool NeedsSseAlignment(const ZydisDecodedInstruction& zi, const ZydisDecodedOperand* ops) {
  if (zi.encoding != ZYDIS_INSTRUCTION_ENCODING_LEGACY) return false;
  switch (zi.meta.isa_ext) {
    case ZYDIS_ISA_EXT_SSE: case ZYDIS_ISA_EXT_SSE2: case ZYDIS_ISA_EXT_SSE3: case ZYDIS_ISA_EXT_SSSE3:
    case ZYDIS_ISA_EXT_SSE4: case ZYDIS_ISA_EXT_AES: case ZYDIS_ISA_EXT_PCLMULQDQ: case ZYDIS_ISA_EXT_SHA:
      break;
    default: return false;
  }
  switch (zi.mnemonic) {
    case ZYDIS_MNEMONIC_MOVUPS: case ZYDIS_MNEMONIC_MOVUPD: case ZYDIS_MNEMONIC_MOVDQU: case ZYDIS_MNEMONIC_LDDQU:
    case ZYDIS_MNEMONIC_MASKMOVDQU: case ZYDIS_MNEMONIC_PCMPESTRI: case ZYDIS_MNEMONIC_PCMPESTRM:
    case ZYDIS_MNEMONIC_PCMPISTRI: case ZYDIS_MNEMONIC_PCMPISTRM:
      return false;
    default: break;
  }
  for (int i = 0; i < zi.operand_count_visible; ++i)
    if (ops[i].type == ZYDIS_OPERAND_TYPE_MEMORY && ops[i].mem.type == ZYDIS_MEMOP_TYPE_MEM && ops[i].size == 128)
      return true;
  return false;
}

void Classify(const ZydisDecodedInstruction& zi, bool far, DecodedInsn& d) {
  using pmu::BranchKind;
  if (d.target_reg >= 0 && !(zi.mnemonic == ZYDIS_MNEMONIC_JMP || zi.mnemonic == ZYDIS_MNEMONIC_CALL))
    d.target_reg = -1;
  switch (zi.mnemonic) {
    case ZYDIS_MNEMONIC_JMP:
      d.branch = far ? BranchKind::kFarJmp : d.has_rel ? BranchKind::kJmp : BranchKind::kIndJmp;
      break;
    case ZYDIS_MNEMONIC_CALL:
      d.branch = far ? BranchKind::kFarCall : d.has_rel ? BranchKind::kCall : BranchKind::kIndCall;
      break;
    case ZYDIS_MNEMONIC_RET: d.branch = far ? BranchKind::kFarRet : BranchKind::kRet; break;
    case ZYDIS_MNEMONIC_IRET:
    case ZYDIS_MNEMONIC_IRETD:
    case ZYDIS_MNEMONIC_IRETQ: d.branch = BranchKind::kIret; break;
    case ZYDIS_MNEMONIC_INT:
    case ZYDIS_MNEMONIC_INT3:
    case ZYDIS_MNEMONIC_INTO:
    case ZYDIS_MNEMONIC_INT1: d.branch = BranchKind::kSoftInt; break;
    case ZYDIS_MNEMONIC_SYSCALL: d.branch = BranchKind::kSyscall; break;
    case ZYDIS_MNEMONIC_SYSRET: d.branch = BranchKind::kSysret; break;
    case ZYDIS_MNEMONIC_SYSENTER: d.branch = BranchKind::kSysenter; break;
    case ZYDIS_MNEMONIC_SYSEXIT: d.branch = BranchKind::kSysexit; break;
    default:
      if (zi.meta.category == ZYDIS_CATEGORY_COND_BR) d.branch = BranchKind::kJcc;
      break;
  }
  if (d.branch == BranchKind::kIndJmp || d.branch == BranchKind::kIndCall) {
    // target_reg stays only for a register operand (not memory).
  } else {
    d.target_reg = -1;
  }
  if (d.has_mem && (d.branch == BranchKind::kIndJmp || d.branch == BranchKind::kIndCall)) d.target_reg = -1;
  d.rep_string = d.rep && zi.meta.category == ZYDIS_CATEGORY_STRINGOP;
}

}  // namespace

const char* InsnKindName(InsnKind k) {
  switch (k) {
    case InsnKind::kOther: return "other";
    case InsnKind::kIntN: return "int";
    case InsnKind::kInt3: return "int3";
    case InsnKind::kInto: return "into";
    case InsnKind::kInt1: return "int1";
    case InsnKind::kIret: return "iret";
    case InsnKind::kRetFar: return "retf";
    case InsnKind::kCallFar: return "call far";
    case InsnKind::kJmpFar: return "jmp far";
    case InsnKind::kSyscall: return "syscall";
    case InsnKind::kSysret: return "sysret";
    case InsnKind::kSysenter: return "sysenter";
    case InsnKind::kSysexit: return "sysexit";
    case InsnKind::kCpuid: return "cpuid";
  }
  return "?";
}

std::string DecodedInsn::ToString() const {
  return absl::StrFormat("%s (%s, len %d, osz %d, asz %d)", mnemonic, Hex(absl::MakeConstSpan(bytes, length)),
                         length, operand_size, address_size);
}

absl::StatusOr<DecodedInsn> DecodeBytes(absl::Span<const uint8_t> bytes, DecodeMode mode) {
  ZydisDecoder dec;
  ZydisStackWidth sw = mode.stack_width == 64   ? ZYDIS_STACK_WIDTH_64
                       : mode.stack_width == 32 ? ZYDIS_STACK_WIDTH_32
                                                : ZYDIS_STACK_WIDTH_16;
  if (ZYAN_FAILED(ZydisDecoderInit(&dec, ZydisModeOf(mode.mode), sw)))
    return absl::InternalError("ZydisDecoderInit failed");
  ZydisDecodedInstruction zi;
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
  const size_t n = std::min<size_t>(bytes.size(), ZYDIS_MAX_INSTRUCTION_LENGTH);
  ZyanStatus zs = ZydisDecoderDecodeFull(&dec, bytes.data(), n, &zi, ops);
  if (ZYAN_FAILED(zs))
    return absl::InvalidArgumentError(absl::StrFormat("cannot decode %s in %s mode (Zydis status 0x%x)",
                                                      Hex(bytes.first(n)), CpuModeName(mode.mode), zs));
  DecodedInsn d;
  d.zydis_mnemonic = static_cast<uint16_t>(zi.mnemonic);
  d.mnemonic = ZydisMnemonicGetString(zi.mnemonic);
  d.length = zi.length;
  d.opcode = zi.opcode;
  d.operand_size = zi.operand_width;
  d.address_size = zi.address_width;
  d.stack_width = zi.stack_width;
  d.rex_w = (zi.attributes & ZYDIS_ATTRIB_HAS_REX) && zi.raw.rex.W;
  d.opsize_prefix = (zi.attributes & ZYDIS_ATTRIB_HAS_OPERANDSIZE) != 0;
  d.addrsize_prefix = (zi.attributes & ZYDIS_ATTRIB_HAS_ADDRESSSIZE) != 0;
  d.lock = (zi.attributes & ZYDIS_ATTRIB_HAS_LOCK) != 0;
  d.rep = (zi.attributes & (ZYDIS_ATTRIB_HAS_REP | ZYDIS_ATTRIB_HAS_REPE | ZYDIS_ATTRIB_HAS_REPNE)) != 0;
  std::memcpy(d.bytes, bytes.data(), zi.length);

  for (int i = 0; i < zi.operand_count_visible; ++i) {
    const ZydisDecodedOperand& op = ops[i];
    if (op.type == ZYDIS_OPERAND_TYPE_IMMEDIATE && op.imm.is_relative && !d.has_rel) {
      d.has_rel = true;
      d.rel = op.imm.value.s;
    } else if (op.type == ZYDIS_OPERAND_TYPE_REGISTER && d.target_reg < 0) {
      d.target_reg = GprOf(op.reg.value);
    } else if (op.type == ZYDIS_OPERAND_TYPE_IMMEDIATE && !d.has_imm) {
      d.has_imm = true;
      d.imm = op.imm.value.u;
    } else if (op.type == ZYDIS_OPERAND_TYPE_POINTER) {
      d.has_far_ptr = true;
      d.far_selector = op.ptr.segment;
      d.far_offset = op.ptr.offset;
    } else if (op.type == ZYDIS_OPERAND_TYPE_MEMORY && op.mem.type == ZYDIS_MEMOP_TYPE_MEM && !d.has_mem) {
      d.has_mem = true;
      d.mem = MemOf(op);
    }
  }

  // The multi-byte NOP and the prefetch hints name memory without accessing
  // it (SDM vol. 2B NOP: "will not issue a memory operation"; PREFETCHh,
  // PREFETCHW: "merely a hint and does not affect program behavior"), where
  // Zydis reports a read: no data breakpoint, load event or cache access.
  const bool no_access = zi.mnemonic == ZYDIS_MNEMONIC_NOP || zi.mnemonic == ZYDIS_MNEMONIC_PREFETCHT0 ||
                         zi.mnemonic == ZYDIS_MNEMONIC_PREFETCHT1 || zi.mnemonic == ZYDIS_MNEMONIC_PREFETCHT2 ||
                         zi.mnemonic == ZYDIS_MNEMONIC_PREFETCHNTA || zi.mnemonic == ZYDIS_MNEMONIC_PREFETCHW ||
                         zi.mnemonic == ZYDIS_MNEMONIC_PREFETCHWT1 || zi.mnemonic == ZYDIS_MNEMONIC_PREFETCH;
  for (int i = 0; i < zi.operand_count && !no_access; ++i) {
    const ZydisDecodedOperand& op = ops[i];
    if (op.type != ZYDIS_OPERAND_TYPE_MEMORY || op.mem.type != ZYDIS_MEMOP_TYPE_MEM) continue;
    if (!(op.actions & (ZYDIS_OPERAND_ACTION_MASK_READ | ZYDIS_OPERAND_ACTION_MASK_WRITE))) continue;
    if (d.data_count >= 3) break;
    DataOperand& o = d.data[d.data_count++];
    o.mem = MemOf(op);
    o.read = (op.actions & ZYDIS_OPERAND_ACTION_MASK_READ) != 0;
    o.write = (op.actions & ZYDIS_OPERAND_ACTION_MASK_WRITE) != 0;
    o.push = op.visibility == ZYDIS_OPERAND_VISIBILITY_HIDDEN && o.mem.base == kRsp && o.write && !o.read;
  }
  d.writes_dr = zi.mnemonic == ZYDIS_MNEMONIC_MOV && zi.operand_count_visible >= 1 &&
                ops[0].type == ZYDIS_OPERAND_TYPE_REGISTER &&
                ZydisRegisterGetClass(ops[0].reg.value) == ZYDIS_REGCLASS_DEBUG;
  d.loads_ss = (zi.mnemonic == ZYDIS_MNEMONIC_MOV || zi.mnemonic == ZYDIS_MNEMONIC_POP) &&
               zi.operand_count_visible >= 1 && ops[0].type == ZYDIS_OPERAND_TYPE_REGISTER &&
               ops[0].reg.value == ZYDIS_REGISTER_SS;

  d.sse_aligned_m128 = NeedsSseAlignment(zi, ops);

  const bool far = zi.meta.branch_type == ZYDIS_BRANCH_TYPE_FAR;
  switch (zi.mnemonic) {
    case ZYDIS_MNEMONIC_INT: d.kind = InsnKind::kIntN; break;
    case ZYDIS_MNEMONIC_INT3: d.kind = InsnKind::kInt3; break;
    case ZYDIS_MNEMONIC_INTO: d.kind = InsnKind::kInto; break;
    case ZYDIS_MNEMONIC_INT1: d.kind = InsnKind::kInt1; break;
    case ZYDIS_MNEMONIC_IRET:
    case ZYDIS_MNEMONIC_IRETD:
    case ZYDIS_MNEMONIC_IRETQ: d.kind = InsnKind::kIret; break;
    case ZYDIS_MNEMONIC_RET:
      if (far) d.kind = InsnKind::kRetFar;
      break;
    case ZYDIS_MNEMONIC_CALL:
      if (far) d.kind = InsnKind::kCallFar;
      break;
    case ZYDIS_MNEMONIC_JMP:
      if (far) d.kind = InsnKind::kJmpFar;
      break;
    case ZYDIS_MNEMONIC_SYSCALL: d.kind = InsnKind::kSyscall; break;
    case ZYDIS_MNEMONIC_SYSRET: d.kind = InsnKind::kSysret; break;
    case ZYDIS_MNEMONIC_SYSENTER: d.kind = InsnKind::kSysenter; break;
    case ZYDIS_MNEMONIC_SYSEXIT: d.kind = InsnKind::kSysexit; break;
    case ZYDIS_MNEMONIC_CPUID: d.kind = InsnKind::kCpuid; break;
    default: break;
  }
  Classify(zi, far, d);
  return d;
}

absl::StatusOr<DecodedInsn> DecodeAt(const CpuState& st, PhysMemory& mem, Gva pc) {
  return DecodeAt(st.paging_regs(), st.cpl() == 3, DecodeModeOf(st), mem, pc);
}

absl::StatusOr<DecodedInsn> DecodeAt(const pmu::PagingRegs& paging, bool user, DecodeMode mode, PhysMemory& mem,
                                     Gva pc) {
  pmu::LinearMemory lm(mem, paging);
  const pmu::Access fetch{.user = user, .fetch = true};
  uint8_t buf[15];
  size_t got = 0;
  pmu::AccessFault first_fault;
  while (got < sizeof(buf)) {
    uint64_t addr = pc.value + got;
    size_t chunk = std::min<size_t>(sizeof(buf) - got, 4096 - (addr & 0xfff));
    auto r = lm.Read(Gva(addr), absl::MakeSpan(buf + got, chunk), fetch);
    if (!r.ok() || !r->ok()) {  // unreadable: stop at the end of readable memory
      if (r.ok()) first_fault = *r;
      if (got == 0)
        return r.ok() ? absl::FailedPreconditionError(absl::StrFormat(
                            "instruction fetch at 0x%x faults (%s, error code 0x%x)", pc.value,
                            first_fault.kind == pmu::AccessFault::Kind::kPageFault ? "#PF" : "non-canonical",
                            first_fault.error_code))
                      : r.status();
      break;
    }
    got += chunk;
  }
  return DecodeBytes(absl::MakeConstSpan(buf, got), mode);
}

absl::StatusOr<DecodedInsn> DecodeCurrent(const CpuState& st, PhysMemory& mem) {
  return DecodeAt(st, mem, Gva(st.pc_linear()));
}

}  // namespace vbts::vcpu
