// feature_msrs.cc: speculation-control MSRs as the CPU model's CPUID describes them, and the
// model's microcode revision and IA32_FEATURE_CONTROL.
#include "pmu/feature_msrs.h"

namespace vbts::pmu {
namespace {

constexpr uint32_t kFeatureControl = 0x3A, kSpecCtrl = 0x48, kPredCmd = 0x49, kBiosSignId = 0x8B, kFlushCmd = 0x10B;
constexpr uint64_t kFeatureControlLock = 1;

}  // namespace

FeatureMsrs::FeatureMsrs(const CpuModel& model) {
  const uint32_t max_leaf = model.Cpuid(0, 0).eax;
  const uint32_t edx7 = max_leaf >= 7 ? model.Cpuid(7, 0).edx : 0;
  spec_ctrl_ = edx7 & (1u << 26);
  stibp_ = edx7 & (1u << 27);
  flush_l1d_ = edx7 & (1u << 28);
  ssbd_ = edx7 & (1u << 31);
  bios_sign_id_ = uint64_t{model.microcode_revision} << 32;
}

std::vector<MsrRange> FeatureMsrs::Intercepted() {
  return {{kFeatureControl, kFeatureControl}, {kSpecCtrl, kPredCmd}, {kBiosSignId, kBiosSignId}, {kFlushCmd, kFlushCmd}};
}

bool FeatureMsrs::Owns(uint32_t msr) {
  return msr == kFeatureControl || msr == kSpecCtrl || msr == kPredCmd || msr == kBiosSignId || msr == kFlushCmd;
}

MsrResult FeatureMsrs::Read(uint32_t msr) const {
  if (msr == kBiosSignId) return {false, bios_sign_id_};
  if (msr == kFeatureControl) return {false, feature_control_};
  if (msr == kSpecCtrl && spec_ctrl_) return {false, spec_ctrl_value_};
  return {true, 0};  // absent, or write-only (PRED_CMD, FLUSH_CMD)
}

MsrResult FeatureMsrs::Write(uint32_t msr, uint64_t value) {
  if (msr == kBiosSignId) return {};
  if (msr == kFeatureControl) {
    if ((feature_control_ & kFeatureControlLock) || (value & ~kFeatureControlLock)) return {true, 0};
    feature_control_ = value;
    return {};
  }
  if (msr == kSpecCtrl && spec_ctrl_) {
    const uint64_t valid = 1 | (stibp_ ? 2 : 0) | (ssbd_ ? 4 : 0);
    if (value & ~valid) return {true, 0};
    spec_ctrl_value_ = value;
    return {};
  }
  if (msr == kPredCmd && spec_ctrl_) return {(value & ~1ull) != 0, 0};  // IBPB: nothing to flush here
  if (msr == kFlushCmd && flush_l1d_) return {(value & ~1ull) != 0, 0};
  return {true, 0};
}

}  // namespace vbts::pmu
