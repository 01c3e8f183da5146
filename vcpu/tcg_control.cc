// tcg_control.cc: see tcg_control.h.
#include "vcpu/tcg_control.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace vbts::vcpu {

absl::StatusOr<kvm_debugregs> TcgControl::GetDebugRegs() {
  kvm_debugregs d{};
  uint64_t db[4], dr6 = 0, dr7 = 0;
  cpu_.GetDebugRegs(db, dr6, dr7);
  for (int i = 0; i < 4; i++) d.db[i] = db[i];
  d.dr6 = dr6;
  d.dr7 = dr7;
  return d;
}

absl::Status TcgControl::SetDebugRegs(const kvm_debugregs& d) {
  const uint64_t db[4] = {d.db[0], d.db[1], d.db[2], d.db[3]};
  cpu_.SetDebugRegs(db, d.dr6, d.dr7);
  return absl::OkStatus();
}

absl::Status TcgControl::InjectException(uint8_t vector, std::optional<uint32_t> error_code) {
  cpu_.QueueException(vector, error_code);
  return absl::OkStatus();
}

absl::StatusOr<kvm_lapic_state> TcgControl::GetLapic() {
  kvm_lapic_state l{};
  static_assert(sizeof(l.regs) == kLapicStateSize);
  lapic_.GetState(reinterpret_cast<uint8_t*>(l.regs), now_ns_());
  return l;
}

absl::Status TcgControl::SetLapic(const kvm_lapic_state& l) {
  lapic_.SetState(reinterpret_cast<const uint8_t*>(l.regs), now_ns_());
  Notify();
  return absl::OkStatus();
}

absl::Status TcgControl::Nmi() {
  cpu_.QueueNmi();
  return absl::OkStatus();
}

absl::Status TcgControl::SetMsrs(absl::Span<const MsrValue> msrs) {
  return absl::UnimplementedError(absl::StrFormat("TCG engine: writing MSR 0x%x from outside the guest",
                                                  msrs.empty() ? 0u : msrs[0].index));
}

absl::StatusOr<uint64_t> TcgControl::GetMsr(uint32_t index) {
  if (index == 0x10 && tsc_) return tsc_();  // IA32_TSC
  return absl::UnimplementedError(absl::StrFormat("TCG engine: reading MSR 0x%x from outside the guest", index));
}

absl::Status TcgControl::SendInterrupt(uint8_t vector) {
  lapic_.Raise(vector);
  Notify();
  return absl::OkStatus();
}

void TcgControl::Notify() {
  if (lapic_.TakeNmi()) cpu_.QueueNmi();
  if (lapic_.Pending()) cpu_.InterruptPending();
}

}  // namespace vbts::vcpu
