// kvm_vm.cc: system and VM ioctls.
#include "vmm/kvm_vm.h"

#include <algorithm>
#include <vector>

#include <fcntl.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace vbts::vmm {

absl::StatusOr<Kvm> Kvm::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrFormat("cannot open %s (KVM missing or no permission)", path));
  ScopedFd owned(fd);
  VBTS_ASSIGN_OR_RETURN(int api, Ioctl(fd, KVM_GET_API_VERSION, 0, "KVM_GET_API_VERSION"));
  if (api != KVM_API_VERSION)
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: KVM API version %d, vbts needs %d", path, api, KVM_API_VERSION));
  return Kvm(std::move(owned), api);
}

int Kvm::CheckExtension(long cap) const {
  int rc = ::ioctl(fd_.get(), KVM_CHECK_EXTENSION, cap);
  return rc < 0 ? 0 : rc;
}

absl::StatusOr<std::vector<kvm_cpuid_entry2>> Kvm::SupportedCpuid() const {
  constexpr int kMax = 256;
  std::vector<uint8_t> buf(sizeof(kvm_cpuid2) + kMax * sizeof(kvm_cpuid_entry2));
  auto* c = reinterpret_cast<kvm_cpuid2*>(buf.data());
  c->nent = kMax;
  VBTS_RETURN_IF_ERROR(Ioctl(fd_.get(), KVM_GET_SUPPORTED_CPUID, c, "KVM_GET_SUPPORTED_CPUID").status());
  return std::vector<kvm_cpuid_entry2>(c->entries, c->entries + c->nent);
}

absl::StatusOr<size_t> Kvm::VcpuMmapSize() const {
  VBTS_ASSIGN_OR_RETURN(int n, Ioctl(fd_.get(), KVM_GET_VCPU_MMAP_SIZE, 0, "KVM_GET_VCPU_MMAP_SIZE"));
  return static_cast<size_t>(n);
}

absl::StatusOr<std::vector<uint32_t>> Kvm::FeatureMsrIndices() const {
  if (CheckExtension(KVM_CAP_GET_MSR_FEATURES) <= 0) return std::vector<uint32_t>();
  kvm_msr_list probe{};
  probe.nmsrs = 0;
  // With nmsrs too small KVM fails with E2BIG and stores the count it needs.
  if (::ioctl(fd_.get(), KVM_GET_MSR_FEATURE_INDEX_LIST, &probe) == 0) return std::vector<uint32_t>();
  if (errno != E2BIG) return absl::ErrnoToStatus(errno, "KVM_GET_MSR_FEATURE_INDEX_LIST(nmsrs=0) failed");
  std::vector<uint8_t> buf(sizeof(kvm_msr_list) + probe.nmsrs * sizeof(uint32_t));
  auto* list = reinterpret_cast<kvm_msr_list*>(buf.data());
  list->nmsrs = probe.nmsrs;
  VBTS_RETURN_IF_ERROR(Ioctl(fd_.get(), KVM_GET_MSR_FEATURE_INDEX_LIST, list, "KVM_GET_MSR_FEATURE_INDEX_LIST",
                             absl::StrCat("nmsrs=", probe.nmsrs))
                           .status());
  return std::vector<uint32_t>(list->indices, list->indices + list->nmsrs);
}

absl::StatusOr<uint64_t> Kvm::GetFeatureMsr(uint32_t index) const {
  struct {
    kvm_msrs header;
    kvm_msr_entry entry;  // header.entries[0]
  } buf{};
  kvm_msrs* m = &buf.header;
  m->nmsrs = 1;
  buf.entry.index = index;
  VBTS_ASSIGN_OR_RETURN(int n, Ioctl(fd_.get(), KVM_GET_MSRS, m, "KVM_GET_MSRS(/dev/kvm)", absl::StrFormat("0x%x", index)));
  if (n != 1) return absl::NotFoundError(absl::StrFormat("KVM does not report feature MSR 0x%x", index));
  return buf.entry.data;
}

absl::StatusOr<std::unique_ptr<Vm>> Vm::Create(const Kvm& kvm) {
  VBTS_ASSIGN_OR_RETURN(int fd, Ioctl(kvm.fd(), KVM_CREATE_VM, 0, "KVM_CREATE_VM"));
  return std::unique_ptr<Vm>(new Vm(&kvm, ScopedFd(fd)));
}

absl::Status Vm::SetMemoryRegion(uint32_t slot, uint64_t gpa, uint64_t size, void* host) {
  kvm_userspace_memory_region r{};
  r.slot = slot;
  r.guest_phys_addr = gpa;
  r.memory_size = size;
  r.userspace_addr = reinterpret_cast<uint64_t>(host);
  return Ioctl(fd(), KVM_SET_USER_MEMORY_REGION, &r, "KVM_SET_USER_MEMORY_REGION",
               absl::StrFormat("slot=%u gpa=0x%x size=0x%x", slot, gpa, size))
      .status();
}

absl::Status Vm::CreateIrqchip() { return Ioctl(fd(), KVM_CREATE_IRQCHIP, 0, "KVM_CREATE_IRQCHIP").status(); }

absl::Status Vm::SetIrqLine(uint32_t gsi, bool level) {
  kvm_irq_level l{};
  l.irq = gsi;
  l.level = level ? 1 : 0;
  return Ioctl(fd(), KVM_IRQ_LINE, &l, "KVM_IRQ_LINE", absl::StrFormat("gsi=%u level=%d", gsi, level)).status();
}

absl::StatusOr<vcpu::IoapicState> Vm::GetIoapic() {
  kvm_irqchip chip{};
  chip.chip_id = KVM_IRQCHIP_IOAPIC;
  VBTS_RETURN_IF_ERROR(Ioctl(fd(), KVM_GET_IRQCHIP, &chip, "KVM_GET_IRQCHIP", "ioapic").status());
  vcpu::IoapicState s;
  s.base_address = chip.chip.ioapic.base_address;
  s.ioregsel = chip.chip.ioapic.ioregsel;
  s.id = chip.chip.ioapic.id;
  s.irr = chip.chip.ioapic.irr;
  static_assert(KVM_IOAPIC_NUM_PINS == vcpu::kIoapicPins);
  for (int i = 0; i < vcpu::kIoapicPins; i++) s.redirtbl[i] = chip.chip.ioapic.redirtbl[i].bits;
  return s;
}

absl::Status Vm::SetIoapic(const vcpu::IoapicState& s) {
  kvm_irqchip chip{};
  chip.chip_id = KVM_IRQCHIP_IOAPIC;
  chip.chip.ioapic.base_address = s.base_address;
  chip.chip.ioapic.ioregsel = s.ioregsel;
  chip.chip.ioapic.id = s.id;
  chip.chip.ioapic.irr = s.irr;
  for (int i = 0; i < vcpu::kIoapicPins; i++) chip.chip.ioapic.redirtbl[i].bits = s.redirtbl[i];
  return Ioctl(fd(), KVM_SET_IRQCHIP, &chip, "KVM_SET_IRQCHIP", "ioapic").status();
}

namespace {
#define VBTS_PIC_FIELDS(X)                                                                                         \
  X(last_irr) X(irr) X(imr) X(isr) X(priority_add) X(irq_base) X(read_reg_select) X(poll) X(special_mask)         \
  X(init_state) X(auto_eoi) X(rotate_on_auto_eoi) X(special_fully_nested_mode) X(init4) X(elcr) X(elcr_mask)
vcpu::PicChipState FromKvm(const kvm_pic_state& k) {
  vcpu::PicChipState s;
#define VBTS_COPY(f) s.f = k.f;
  VBTS_PIC_FIELDS(VBTS_COPY)
#undef VBTS_COPY
  return s;
}
kvm_pic_state ToKvm(const vcpu::PicChipState& s) {
  kvm_pic_state k{};
#define VBTS_COPY(f) k.f = s.f;
  VBTS_PIC_FIELDS(VBTS_COPY)
#undef VBTS_COPY
  return k;
}
#undef VBTS_PIC_FIELDS
}  // namespace

absl::Status Vm::CreatePit() {
  kvm_pit_config c{};
  c.flags = KVM_PIT_SPEAKER_DUMMY;
  return Ioctl(fd(), KVM_CREATE_PIT2, &c, "KVM_CREATE_PIT2").status();
}

namespace {
#define VBTS_PIT_FIELDS(X)                                                                                         \
  X(count) X(latched_count) X(count_latched) X(status_latched) X(status) X(read_state) X(write_state)               \
  X(write_latch) X(rw_mode) X(mode) X(bcd) X(gate) X(count_load_time)
}  // namespace

absl::StatusOr<std::pair<std::array<vcpu::PitChannelState, 3>, bool>> Vm::GetPit() {
  kvm_pit_state2 k{};
  VBTS_RETURN_IF_ERROR(Ioctl(fd(), KVM_GET_PIT2, &k, "KVM_GET_PIT2").status());
  std::array<vcpu::PitChannelState, 3> ch;
  for (int i = 0; i < 3; i++) {
#define VBTS_COPY(f) ch[i].f = k.channels[i].f;
    VBTS_PIT_FIELDS(VBTS_COPY)
#undef VBTS_COPY
  }
  return std::make_pair(ch, (k.flags & KVM_PIT_FLAGS_SPEAKER_DATA_ON) != 0);
}

absl::Status Vm::SetPit(const std::array<vcpu::PitChannelState, 3>& ch, bool speaker, bool hpet_legacy) {
  kvm_pit_state2 k{};
  for (int i = 0; i < 3; i++) {
#define VBTS_COPY(f) k.channels[i].f = ch[i].f;
    VBTS_PIT_FIELDS(VBTS_COPY)
#undef VBTS_COPY
  }
#undef VBTS_PIT_FIELDS
  k.flags = (speaker ? KVM_PIT_FLAGS_SPEAKER_DATA_ON : 0) | (hpet_legacy ? KVM_PIT_FLAGS_HPET_LEGACY : 0);
  return Ioctl(fd(), KVM_SET_PIT2, &k, "KVM_SET_PIT2").status();
}

absl::StatusOr<std::pair<vcpu::PicChipState, vcpu::PicChipState>> Vm::GetPic() {
  std::pair<vcpu::PicChipState, vcpu::PicChipState> r;
  for (uint32_t id : {KVM_IRQCHIP_PIC_MASTER, KVM_IRQCHIP_PIC_SLAVE}) {
    kvm_irqchip chip{};
    chip.chip_id = id;
    VBTS_RETURN_IF_ERROR(Ioctl(fd(), KVM_GET_IRQCHIP, &chip, "KVM_GET_IRQCHIP", "pic").status());
    (id == KVM_IRQCHIP_PIC_MASTER ? r.first : r.second) = FromKvm(chip.chip.pic);
  }
  return r;
}

absl::Status Vm::SetPic(const vcpu::PicChipState& master, const vcpu::PicChipState& slave) {
  for (uint32_t id : {KVM_IRQCHIP_PIC_MASTER, KVM_IRQCHIP_PIC_SLAVE}) {
    kvm_irqchip chip{};
    chip.chip_id = id;
    chip.chip.pic = ToKvm(id == KVM_IRQCHIP_PIC_MASTER ? master : slave);
    VBTS_RETURN_IF_ERROR(Ioctl(fd(), KVM_SET_IRQCHIP, &chip, "KVM_SET_IRQCHIP", "pic").status());
  }
  return absl::OkStatus();
}

absl::Status Vm::EnableCap(uint32_t cap, uint64_t arg0) {
  kvm_enable_cap c{};
  c.cap = cap;
  c.args[0] = arg0;
  return Ioctl(fd(), KVM_ENABLE_CAP, &c, "KVM_ENABLE_CAP", absl::StrFormat("cap=%u arg=0x%x", cap, arg0)).status();
}

absl::Status Vm::SetMsrFilter(absl::Span<const MsrRange> deny) {
  // KVM takes at most KVM_MSR_FILTER_MAX_RANGES ranges, each with a bitmap
  // (bit set = allow). Deny ranges that lie close together share one filter
  // range whose bitmap allows the MSRs between them.
  constexpr uint32_t kMaxSpan = 0x400;  // MSRs per filter range (128-byte bitmap)
  std::vector<MsrRange> sorted(deny.begin(), deny.end());
  std::sort(sorted.begin(), sorted.end(), [](const MsrRange& a, const MsrRange& b) { return a.base < b.base; });
  struct Group {
    uint32_t base, end;  // [base, end)
    std::vector<MsrRange> members;
  };
  std::vector<Group> groups;
  for (const MsrRange& r : sorted) {
    if (r.count == 0 || r.count > kMaxSpan)
      return absl::InvalidArgumentError(absl::StrFormat("MSR filter range at 0x%x: bad length %u", r.base, r.count));
    if (!groups.empty() && r.base + r.count - groups.back().base <= kMaxSpan) {
      groups.back().end = std::max(groups.back().end, r.base + r.count);
      groups.back().members.push_back(r);
    } else {
      groups.push_back({r.base, r.base + r.count, {r}});
    }
  }
  if (groups.size() > KVM_MSR_FILTER_MAX_RANGES)
    return absl::InvalidArgumentError(absl::StrFormat("%u MSR filter ranges, KVM takes at most %d", groups.size(),
                                                      KVM_MSR_FILTER_MAX_RANGES));
  VBTS_RETURN_IF_ERROR(EnableCap(KVM_CAP_X86_USER_SPACE_MSR, KVM_MSR_EXIT_REASON_FILTER));
  kvm_msr_filter f{};
  f.flags = KVM_MSR_FILTER_DEFAULT_ALLOW;
  std::vector<std::vector<uint8_t>> bitmaps;  // KVM copies them during the ioctl
  for (size_t i = 0; i < groups.size(); i++) {
    const Group& g = groups[i];
    std::vector<uint8_t> bitmap((g.end - g.base + 7) / 8, 0xFF);
    for (const MsrRange& m : g.members)
      for (uint32_t msr = m.base; msr < m.base + m.count; msr++)
        bitmap[(msr - g.base) / 8] &= static_cast<uint8_t>(~(1u << ((msr - g.base) % 8)));
    bitmaps.push_back(std::move(bitmap));
    f.ranges[i].flags = KVM_MSR_FILTER_READ | KVM_MSR_FILTER_WRITE;
    f.ranges[i].base = g.base;
    f.ranges[i].nmsrs = g.end - g.base;
    f.ranges[i].bitmap = bitmaps.back().data();
  }
  return Ioctl(fd(), KVM_X86_SET_MSR_FILTER, &f, "KVM_X86_SET_MSR_FILTER").status();
}

absl::Status Vm::SignalMsi(uint32_t apic_id, uint8_t vector) {
  kvm_msi m{};
  m.address_lo = 0xFEE00000u | (apic_id << 12);
  m.data = vector;
  VBTS_ASSIGN_OR_RETURN(int rc, Ioctl(fd(), KVM_SIGNAL_MSI, &m, "KVM_SIGNAL_MSI", absl::StrFormat("vector=0x%x", vector)));
  if (rc != 1) return absl::FailedPreconditionError(absl::StrFormat("KVM_SIGNAL_MSI(vector=0x%x) was not delivered (rc=%d)", vector, rc));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<vcpu::KvmVcpu>> Vm::CreateVcpu(int id, bool sync_regs) {
  VBTS_ASSIGN_OR_RETURN(size_t run_size, kvm_->VcpuMmapSize());
  return vcpu::KvmVcpu::Create(fd(), id, run_size, sync_regs);
}

}  // namespace vbts::vmm
