// decoder.h: a thin Zydis wrapper that decodes one guest instruction in the
// vCPU's current mode into a small vbts struct the completer understands.
#ifndef VBTS_VCPU_DECODER_H_
#define VBTS_VCPU_DECODER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pmu/branch.h"
#include "pmu/phys_memory.h"
#include "pmu/types.h"
#include "vcpu/cpu_state.h"

namespace vbts::vcpu {

// The instructions the completion engine knows; everything else is kOther.
enum class InsnKind : uint8_t {
  kOther,
  kIntN,      // CD ib
  kInt3,      // CC
  kInto,      // CE (invalid in 64-bit mode)
  kInt1,      // F1 (ICEBP)
  kIret,      // CF: IRET / IRETD / IRETQ (operand_size tells which)
  kRetFar,    // CB, CA iw
  kCallFar,   // 9A ptr16:16/32, FF /3 m16:16/32/64
  kJmpFar,    // EA ptr16:16/32, FF /5 m16:16/32/64
  kSyscall,   // 0F 05
  kSysret,    // 0F 07 (REX.W: to 64-bit mode)
  kSysenter,  // 0F 34
  kSysexit,   // 0F 35 (REX.W: to 64-bit mode)
  kCpuid,     // 0F A2
};
const char* InsnKindName(InsnKind k);

// Segment registers in their ModR/M "Sreg" encoding order (SDM vol. 2 3.1.1.3).
enum class SegReg : uint8_t { kEs, kCs, kSs, kDs, kFs, kGs };

// An explicit memory operand: seg:[base + index*scale + disp], computed with
// the instruction's address size.  base/index are Gpr numbers, or -1;
// base == kRipBase means RIP-relative (relative to the next instruction).
inline constexpr int kRipBase = 16;
struct MemOperand {
  SegReg seg = SegReg::kDs;
  int base = -1;
  int index = -1;
  uint8_t scale = 1;
  int64_t disp = 0;
  uint16_t size_bits = 0;  // operand size in bits (48 for m16:32, 80 for m16:64)
};

// A data memory access of an instruction (explicit, implicit or hidden
// operand: MOV [m], PUSH/POP/CALL/RET stack slots, string operands), for
// the guest's data breakpoints.  `push`: a stack write below the stack
// pointer (PUSH, CALL, ENTER, PUSHF): Zydis names it [rSP], the slot written
// is [rSP - size].
struct DataOperand {
  MemOperand mem;
  bool read = false;
  bool write = false;
  bool push = false;
};

struct DecodedInsn {
  InsnKind kind = InsnKind::kOther;
  uint16_t zydis_mnemonic = 0;  // ZydisMnemonic, for diagnostics
  std::string mnemonic;         // "iretd", "int", ...
  uint8_t length = 0;
  uint8_t opcode = 0;         // last opcode byte
  uint8_t operand_size = 0;   // 16, 32 or 64 (effective)
  uint8_t address_size = 0;   // 16, 32 or 64 (effective)
  uint8_t stack_width = 0;    // 16, 32 or 64
  bool rex_w = false;
  bool opsize_prefix = false;  // 66
  bool addrsize_prefix = false;  // 67
  bool lock = false;
  bool rep = false;
  bool has_imm = false;
  uint64_t imm = 0;  // first immediate: INT vector, RET imm16
  bool has_far_ptr = false;  // direct ptr16:16 / ptr16:32
  uint16_t far_selector = 0;
  uint32_t far_offset = 0;
  bool has_mem = false;  // indirect far CALL/JMP
  MemOperand mem;
  // Every data memory operand (up to 3: MOVS has two, PUSH [m] a load and a
  // stack store); LEA/NOP-style address-only operands are not accesses.
  uint8_t data_count = 0;
  DataOperand data[3];
  bool writes_dr = false;  // MOV DRn, r32/r64 (changes the guest's breakpoints)
  // MOV SS or POP SS: the next instruction runs in their shadow, which holds
  // debug exceptions until after it (SDM vol. 3A 6.8.3).
  bool loads_ss = false;
  // A legacy-encoded (not VEX) SSE instruction whose 128-bit memory operand
  // must be 16-byte aligned: #GP(0) otherwise (SDM vol. 2A 2.5, exception
  // types 1, 2 and 4: "Legacy SSE instruction: memory operand is not
  // aligned on a 16-byte boundary, regardless of segment"; vol. 1 11.6.8).
  // MOVUPS, MOVUPD, MOVDQU, LDDQU, MASKMOVDQU and PCMPESTRI/ESTRM/ISTRI/ISTRM
  // take any alignment; scalar and 64-bit operands are never checked.
  bool sse_aligned_m128 = false;
  uint8_t bytes[15] = {};

  // Branch classification for tracing (pmu/branch.h): the kind of transfer
  // this instruction makes when it transfers control, kNone if it never
  // does.  Near direct branches (JMP/CALL/Jcc/JCXZ/LOOP rel) carry their
  // displacement: target = (next IP + rel) truncated to the operand size.
  pmu::BranchKind branch = pmu::BranchKind::kNone;
  bool has_rel = false;
  int64_t rel = 0;
  // A string instruction with a REP prefix: the host may stop more than once
  // at its RIP before it retires.
  bool rep_string = false;
  // For near indirect JMP/CALL through a register: its Gpr number, else -1.
  int target_reg = -1;

  std::string ToString() const;  // "iretd (len 1, osz 32)"
};

// Machine mode and stack width to decode in (SDM 3A 2.2, 3.4.5); Zydis
// types stay out of this header.
struct DecodeMode {
  CpuMode mode = CpuMode::kProtected32;
  int stack_width = 32;
};
inline DecodeMode DecodeModeOf(const CpuState& st) {
  DecodeMode m;
  m.mode = st.mode();
  // Stack width: 64 in 64-bit mode, else SS.B (SDM 3.4.5 "D/B flag").
  if (m.mode == CpuMode::kLong64)
    m.stack_width = 64;
  else
    m.stack_width = st.ss.db ? 32 : 16;
  return m;
}

// Decodes `bytes` (up to 15 are looked at).  InvalidArgument if Zydis rejects
// them (the message names the bytes).
absl::StatusOr<DecodedInsn> DecodeBytes(absl::Span<const uint8_t> bytes, DecodeMode mode);

// Reads up to 15 bytes at linear address `pc` through the guest's paging
// (instruction-fetch access at the current CPL; the CS limit is not checked)
// and decodes them.  Reading stops at the first page that is not readable;
// if no byte is readable, or the readable bytes are not a whole instruction,
// the result is an error naming the address and the fetch fault.
absl::StatusOr<DecodedInsn> DecodeAt(const CpuState& st, PhysMemory& mem, Gva pc);
// The same under explicit paging, fetch privilege and mode (an instruction
// that ran before the current state: its CS and CPL may differ from now).
absl::StatusOr<DecodedInsn> DecodeAt(const pmu::PagingRegs& paging, bool user, DecodeMode mode, PhysMemory& mem,
                                     Gva pc);
// DecodeAt(st, mem, st.pc_linear()).
absl::StatusOr<DecodedInsn> DecodeCurrent(const CpuState& st, PhysMemory& mem);

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_DECODER_H_
