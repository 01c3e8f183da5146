// descriptors.cc: descriptor builders and descriptor → segment-cache conversion.
#include "vcpu/descriptors.h"

namespace vbts::vcpu {

Descriptor MakeSegmentDescriptor(uint32_t base, uint32_t raw_limit, uint8_t type, bool s, int dpl, bool present,
                                 bool db, bool l, bool g, bool avl) {
  // Layout: SDM 3.4.5, figure 3-8.
  uint64_t lo = (raw_limit & 0xffffull) | (static_cast<uint64_t>(base & 0xffffff) << 16) |
                (static_cast<uint64_t>(type & 0xf) << 40) | (static_cast<uint64_t>(s) << 44) |
                (static_cast<uint64_t>(dpl & 3) << 45) | (static_cast<uint64_t>(present) << 47) |
                (static_cast<uint64_t>((raw_limit >> 16) & 0xf) << 48) | (static_cast<uint64_t>(avl) << 52) |
                (static_cast<uint64_t>(l) << 53) | (static_cast<uint64_t>(db) << 54) |
                (static_cast<uint64_t>(g) << 55) | (static_cast<uint64_t>(base >> 24) << 56);
  return Descriptor{lo, 0};
}

Descriptor MakeCode32(int dpl, bool conforming) {
  return MakeSegmentDescriptor(0, 0xfffff, kTypeCode | kTypeReadable | (conforming ? kTypeConforming : 0), true, dpl,
                               true, /*db=*/true, /*l=*/false, /*g=*/true);
}

Descriptor MakeCode64(int dpl, bool conforming) {
  return MakeSegmentDescriptor(0, 0xfffff, kTypeCode | kTypeReadable | (conforming ? kTypeConforming : 0), true, dpl,
                               true, /*db=*/false, /*l=*/true, /*g=*/true);
}

Descriptor MakeData32(int dpl) {
  return MakeSegmentDescriptor(0, 0xfffff, kTypeWritable, true, dpl, true, /*db=*/true, /*l=*/false, /*g=*/true);
}

Descriptor MakeGate(uint8_t type, uint16_t selector, uint64_t offset, int dpl, bool present, int ist) {
  // Layout: SDM 6.11 figure 6-2 (32-bit) and 6.14.1 figure 6-8 (64-bit).
  uint64_t lo = (offset & 0xffff) | (static_cast<uint64_t>(selector) << 16) |
                (static_cast<uint64_t>(ist & 7) << 32) | (static_cast<uint64_t>(type & 0xf) << 40) |
                (static_cast<uint64_t>(dpl & 3) << 45) | (static_cast<uint64_t>(present) << 47) |
                (((offset >> 16) & 0xffff) << 48);
  return Descriptor{lo, (offset >> 32) & 0xffffffffull};
}

Descriptor MakeSystemDescriptor(uint8_t type, uint64_t base, uint32_t raw_limit, int dpl, bool present) {
  Descriptor d = MakeSegmentDescriptor(static_cast<uint32_t>(base), raw_limit, type, /*s=*/false, dpl, present,
                                       false, false, false);
  d.hi = base >> 32;
  return d;
}

Segment SegmentFromDescriptor(const Descriptor& d, uint16_t selector) {
  Segment seg;
  seg.selector = selector;
  seg.base = d.base32();
  seg.limit = d.limit();
  // Loading a code/data descriptor sets its accessed bit (SDM 3.4.5.1); the
  // cached type shows it set, as KVM reports it.
  seg.type = d.type() | (d.s() ? kTypeAccessed : 0);
  seg.s = d.s();
  seg.dpl = d.dpl();
  seg.present = d.present();
  seg.db = d.db();
  seg.l = d.l();
  seg.g = d.g();
  seg.avl = d.avl();
  seg.unusable = false;
  return seg;
}

Segment FlatSegment(uint16_t selector, uint8_t type, int dpl, bool db, bool l) {
  Segment seg;
  seg.selector = selector;
  seg.base = 0;
  seg.limit = 0xffffffffu;  // 0xFFFFF in 4-KiB units
  seg.type = type;
  seg.s = true;
  seg.dpl = static_cast<uint8_t>(dpl);
  seg.present = true;
  seg.db = db;
  seg.l = l;
  seg.g = true;
  return seg;
}

Segment NullSegment(uint16_t selector, int dpl) {
  Segment seg;
  seg.selector = selector;
  seg.dpl = static_cast<uint8_t>(dpl);
  seg.unusable = true;
  return seg;
}

}  // namespace vbts::vcpu
