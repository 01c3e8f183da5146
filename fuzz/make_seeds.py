#!/usr/bin/env python3
"""make_seeds.py: regenerates the seed corpora of vpmu_fuzz, completer_fuzz,
pci_fuzz and hpet_fuzz (fuzz/corpus/vpmu/, fuzz/corpus/completer/, fuzz/corpus/pci/,
fuzz/corpus/hpet/) in the input encodings those
targets decode (fuzz/fuzz_input.h: little-endian fields, zeros past the end):
guest programming that reaches each part of the virtual PMU (BTS, PEBS, LBR,
counters, BTF, paging, pointers beyond RAM) and each instruction the completer
performs, from states where it completes, faults or is refused.
Usage: fuzz/make_seeds.py   (from anywhere; overwrites the seed files)"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def u8(v): return struct.pack('<B', v & 0xff)
def u16(v): return struct.pack('<H', v & 0xffff)
def u32(v): return struct.pack('<I', v & 0xffffffff)
def u64(v): return struct.pack('<Q', v & 0xffffffffffffffff)
def val(v): return u8(0) + u64(v)          # FuzzInput::Value, any 64 bits


# ---- vpmu_fuzz: model byte (index into CpuModels(): westmere, core-duo,
# pentium4, skylake, icelake-server, in pmu/cpu_model.cc's order; 0x40 LBRs in
# the kernel, 0x80 without PMU), then operations.
WESTMERE, CORE_DUO, PENTIUM4, SKYLAKE, ICELAKE = 0, 1, 2, 3, 4
def wrmsr(msr, v): return u8(0) + u16(0xffff) + u32(msr) + val(v)
def rdmsr(msr): return u8(1) + u16(0xffff) + u32(msr)
def mem64(at, v): return u8(3) + u16(at) + val(v)
def branch(kind, frm, to, cpl_from=0, cpl_to=0, mode=2, vector=0, ia32e=False, tf=False, regs=False, mem=0):
    f = cpl_from | cpl_to << 2 | mode << 4 | mode << 6
    g = (1 if ia32e else 0) | (4 if tf else 0) | (8 | 16 if regs else 0) | mem << 5
    b = u8(4) + u8(kind) + val(frm) + val(to) + u8(f) + u8(vector) + u8(g)
    if mem & 1:
        b += val(0x5000)   # load_la
    if mem & 2:
        b += val(0x5008)   # store_la
    b += u32(0x202)
    if regs:
        b += b''.join(u8(1) + u16(0x1000 + 8 * i) for i in range(16))
    return b
def count(cpl, n): return u8(5) + u8(cpl) + u16(n)
def rdpmc(ecx): return u8(6) + u32(ecx)
def paging(mode_byte, cr3): return u8(7) + u8(mode_byte) + val(cr3) + u8(20)   # maxphyaddr 52
def kernel_debugctl(v): return u8(8) + val(v)
def access(pa, size, store=False): return u8(9) + val(pa) + u8(size) + u8(4 if store else 0)  # CPL 0, observed
def query(): return u8(11)
JCC, JMP, INDJMP, CALL, INDCALL, RET, FARJMP, FARCALL, FARRET, IRET, SOFTINT = range(1, 12)
SYSCALL, SYSRET, SYSENTER, SYSEXIT, EXCEPTION, INTERRUPT, NMI = range(12, 19)
ALL_KINDS = list(range(19))

def ds64(ds, base, n, rec, thr_n=None, pebs=None):
    out = mem64(ds, base) + mem64(ds + 8, base) + mem64(ds + 16, base + n * rec)
    out += mem64(ds + 24, base + (thr_n if thr_n is not None else n + 1) * rec)
    if pebs:
        pb, pn = pebs
        out += mem64(ds + 0x20, pb) + mem64(ds + 0x28, pb) + mem64(ds + 0x30, pb + pn * 0xc0)
        out += mem64(ds + 0x38, pb + pn * 0xc0) + mem64(ds + 0x40, (1 << 48) - 4)
    return out

def branches(n, base=0x100000, cpl=0, ia32e=False, regs=False):
    return b''.join(branch(ALL_KINDS[1 + i % 18], base + 16 * i, base + 0x400 + 32 * i, cpl, cpl,
                           3 if ia32e else 2, vector=i + 3, ia32e=ia32e, regs=regs) for i in range(n))

VPMU = {
    'bts_westmere': u8(WESTMERE) + ds64(0x1000, 0x2000, 16, 24) + wrmsr(0x600, 0x1000) + wrmsr(0x1D9, 0xC0)
        + branches(20) + rdmsr(0x1D9) + query(),
    'bts_threshold_pmi': u8(WESTMERE) + ds64(0x1000, 0x2000, 8, 24, thr_n=4) + wrmsr(0x600, 0x1000)
        + wrmsr(0x1D9, 0x1C0) + branches(10),
    'bts_cpl_filter': u8(WESTMERE) + ds64(0x1000, 0x2000, 16, 24) + wrmsr(0x600, 0x1000) + wrmsr(0x1D9, 0x2C0)
        + branches(6, cpl=3) + branches(6, cpl=0),
    'bts_beyond_ram': u8(WESTMERE) + ds64(0x1000, 0xFFF0, 16, 24) + wrmsr(0x600, 0x1000) + wrmsr(0x1D9, 0xC0)
        + branches(4) + wrmsr(0x600, 0x20000) + branches(2) + mem64(0x1000, 0xFFFFFFFFFFFFFFF0) + branches(2),
    'bts32_core_duo': u8(CORE_DUO) + mem64(0x1000, 0x2000 | 0x2000 << 32) + mem64(0x1008, (0x2000 + 12 * 8) | 0x3000 << 32)
        + wrmsr(0x600, 0x1000) + wrmsr(0x1D9, 0xC0) + branches(10) + wrmsr(0x1D9, 1) + branches(10)
        + b''.join(rdmsr(0x40 + i) for i in range(8)),
    'lbr_westmere': u8(WESTMERE) + wrmsr(0x1D9, 1) + branches(20) + rdmsr(0x1C9)
        + b''.join(rdmsr(0x680 + i) + rdmsr(0x6C0 + i) for i in range(16)) + wrmsr(0x1C8, 0x3) + branches(8),
    'lbr_skylake_info': u8(SKYLAKE) + wrmsr(0x1C8, 0x1C4) + wrmsr(0x1D9, 0x801) + branches(40)
        + b''.join(rdmsr(0xDC0 + i) for i in range(32)) + wrmsr(0x1C9, 31) + rdmsr(0x1DD) + rdmsr(0x1DE),
    'btf_tf': u8(WESTMERE) + wrmsr(0x1D9, 2) + branch(0, 0x1000, 0x1002, tf=True) + branch(JMP, 0x1002, 0x1100, tf=True)
        + branch(EXCEPTION, 0x1100, 0x4000, vector=1),
    'counters_pmi': u8(SKYLAKE) + wrmsr(0x186, 0x5300C0) + wrmsr(0x187, 0x5300C4) + wrmsr(0xC1, 0xFFFFFFF0)
        + wrmsr(0x38D, 0xBBB) + wrmsr(0x309, (1 << 48) - 8) + wrmsr(0x38F, 0x70000000F) + count(0, 5)
        + branches(12) + rdpmc(0) + rdpmc(1 << 30) + rdmsr(0x38E) + wrmsr(0x390, 0xF) + count(3, 1000),
    'pebs_skylake': u8(SKYLAKE) + ds64(0x1000, 0x2000, 4, 24, pebs=(0x3000, 8)) + wrmsr(0x600, 0x1000)
        + wrmsr(0x186, 0x5300C0) + wrmsr(0x4C1, (1 << 48) - 3) + wrmsr(0x3F1, 1) + wrmsr(0x38F, 1)
        + branches(10, regs=True),
    'pebs_westmere_lm64': u8(WESTMERE) + ds64(0x1000, 0x2000, 4, 24, pebs=(0x3000, 2)) + wrmsr(0x600, 0x1000)
        + wrmsr(0x186, 0x4300C0) + wrmsr(0xC1, 0xFFFFFFFE) + wrmsr(0x3F1, 1) + wrmsr(0x38F, 1)
        + branches(8, ia32e=True, regs=True),
    # 4-level paging: PML4 0x8000 -> PDPT 0x9000 -> 1 GiB page at 0 (P|W|PS), DS area at its linear address.
    'bts_paging_4level': u8(WESTMERE) + mem64(0x8000, 0x9003) + mem64(0x9000, 0x83) + paging(3, 0x8000)
        + ds64(0x1000, 0x2000, 16, 24) + wrmsr(0x600, 0x1000) + wrmsr(0x1D9, 0xC0) + branches(8, ia32e=True)
        + paging(1, 0x8000) + branches(4) + paging(2, 0xF000) + branches(4),
    'passthrough_lbr': u8(WESTMERE | 0x40) + wrmsr(0x1D9, 0x801) + kernel_debugctl(0) + rdmsr(0x1D9)
        + wrmsr(0x186, 0x5300C4) + wrmsr(0xC1, 0xFFFFFFFF) + wrmsr(0x38F, 1) + branches(4) + kernel_debugctl(1)
        + query(),
    # NetBurst PEBS: 32-bit DS at 0x1000 (PEBS base/index 0x3000, maximum 0x30A0, threshold
    # 0x3050, counter reset -2), RAT_ESCR0 tags loads and stores, CRU_ESCR2 front_end_event,
    # IQ_COUNTER4 at -1 with PEBS_ENABLE MY_THR|UOP_TAG, IQ_CCCR4 enabled; loads, stores,
    # an untaggable locked access and a RET.
    'pebs_p4': u8(PENTIUM4) + mem64(0x1010, 0x3000 | 0x3000 << 32) + mem64(0x1018, 0x30A0 | 0x3050 << 32)
        + mem64(0x1020, (1 << 40) - 2) + wrmsr(0x600, 0x1000) + wrmsr(0x3BC, 0x04000C08) + wrmsr(0x3CC, 0x10000208)
        + wrmsr(0x310, (1 << 40) - 1) + wrmsr(0x3F1, 0x03000000) + wrmsr(0x370, 0x3B000)
        + b''.join(branch(0, 0x100000 + 4 * i, 0x100004 + 4 * i, regs=True, mem=[1, 2, 3, 7][i % 4]) for i in range(12))
        + branch(RET, 0x100100, 0x100200, regs=True, mem=1) + rdmsr(0x310) + rdmsr(0x370) + query()
        # replay_event: 1stL/2ndL misses and split loads/stores (SAAT ESCRs), with data accesses.
        + wrmsr(0x3CC, 0x12000208) + wrmsr(0x3F2, 3) + wrmsr(0x3F1, 0x03000403) + wrmsr(0x3AF, 0x08000408)
        + wrmsr(0x3AE, 0x0A000408) + wrmsr(0x310, (1 << 40) - 2)
        + b''.join(access(0x4000 + 62 * i, 4, i & 1) + branch(0, 0x100300 + 4 * i, 0x100304 + 4 * i, regs=True,
                                                                mem=[1, 2][i & 1]) for i in range(10)),
    'no_pmu': u8(WESTMERE | 0x80) + wrmsr(0x1D9, 0xC0) + rdmsr(0x600) + rdpmc(0) + branches(3),
}

# ---- completer_fuzz: machine byte (0 real, 1 pm16 CPL0, 2 pm32 CPL3, 3 pm32
# CPL0, 4 compat CPL3, 5 lm64 CPL0, 6 lm64 CPL3, 7 compat CPL0), changes,
# 0x0B (stop), instruction bytes.
def gpr(r, v): return u8(0) + u8(r) + val(v)
def rflags(v): return u8(1) + u32(v)
def ram(at, data): return u8(7) + u32(at) + u8(len(data)) + data
def gdt(index, lo): return u8(8) + u8(0) + u8(index) + u64(lo)
def idt(slot, lo): return u8(8) + u8(1) + u8(slot) + u64(lo)
def dtable(is_gdt, base, limit): return u8(3) + u8(1 if is_gdt else 0) + val(base) + u16(limit)
def cr(which, v): return u8(4) + u8(which) + val(v)
def rip(v): return u8(6) + val(v)
STOP = u8(11)
RSP, RCX, R11 = 4, 1, 11
def frame(at, vals, size):  # in writes of at most 32 bytes
    data = b''.join(struct.pack('<Q', v)[:size] for v in vals)
    return b''.join(ram(at + i, data[i:i + 32]) for i in range(0, len(data), 32))

COMPLETER = {
    'pm32_cpl3_int80': u8(2) + STOP + bytes([0xcd, 0x80]),
    'pm32_cpl0_iretd_to_cpl3': u8(3) + frame(0x9000, [0x200, 0x1b, 0x202, 0x7000, 0x23], 4) + STOP + bytes([0xcf]),
    'lm64_cpl0_iretq': u8(5) + frame(0x9000, [0x300, 0x33, 0x202, 0x7000, 0x23], 8) + STOP + bytes([0x48, 0xcf]),
    'lm64_cpl3_syscall': u8(6) + STOP + bytes([0x0f, 0x05]),
    'lm64_cpl0_sysretq': u8(5) + gpr(RCX, 0x1000) + gpr(R11, 0x202) + STOP + bytes([0x48, 0x0f, 0x07]),
    'lm64_cpl0_sysretq_noncanonical': u8(5) + gpr(RCX, 0x0000800000000000) + STOP + bytes([0x48, 0x0f, 0x07]),
    'pm32_cpl3_sysenter': u8(2) + STOP + bytes([0x0f, 0x34]),
    'pm32_cpl0_sysexit': u8(3) + gpr(RCX, 0x7000) + gpr(2, 0x200) + STOP + bytes([0x0f, 0x35]),
    'pm32_cpl3_lcall_gate': u8(2) + STOP + bytes([0x9a, 0, 0, 0, 0, 0x48, 0]),
    'pm32_cpl0_lret_to_cpl3': u8(3) + frame(0x9000, [0x200, 0x1b, 0x7000, 0x23], 4) + STOP + bytes([0xcb]),
    'real_int10_iret': u8(0) + ram(0x40, bytes([0x00, 0x05, 0x00, 0x00])) + STOP + bytes([0xcd, 0x10]),
    'lm64_cpuid_leaf_a': u8(5) + gpr(0, 0xa) + STOP + bytes([0x0f, 0xa2]),
    'lm64_cpl3_int3_ist': u8(6) + STOP + bytes([0xcc]),
    'pm32_into_of': u8(3) + rflags(0xa02) + STOP + bytes([0xce]),
    'compat_cpl3_int80_bad_idt': u8(4) + dtable(False, 0x3FFF0, 0xfff) + STOP + bytes([0xcd, 0x80]),
}


# ---- pci_fuzz: U16 length + RAM bytes (tables), then operations (kind & 7:
# 0 configuration cycle, 1 edu write, 2 edu read, 3 VT-d write, 4 VT-d read,
# 5 a request; kind bit 4: 8-byte VT-d access, bit 6: configuration write).
def pci_ram(entries):
    mem = bytearray(0x8000)
    for at, v in entries:
        mem[at:at + 8] = u64(v)
    return u16(len(mem)) + bytes(mem)
def cfg_write(reg, v, n=4): return u8(0x40) + u8(reg) + u8({1: 0, 2: 1, 4: 2}[n]) + u8(0) + u32(v)
def edu_w(off, v, size=4): return u8(1) + u16(off) + u8(size) + val(v)
def vtd_w(off, v, size=4): return u8(3 | (0x10 if size == 8 else 0)) + u16(off) + u16(0) + val(v)
def vtd_r(off): return u8(4) + u16(off)
GCMD_TE, GCMD_SRTP, GCMD_QIE, GCMD_IRE, GCMD_SIRTP = 1 << 31, 1 << 30, 1 << 26, 1 << 25, 1 << 24
DMA_TABLES = pci_ram([(0x1000, 0x2000 | 1), (0x2000 + 16 * 0x18, 0x3000 | 1), (0x2000 + 16 * 0x18 + 8, 1),
                      (0x3000, 0x4000 | 3), (0x4000, 0x5000 | 3), (0x5000, 0x6000 | 3)])
EDU_DMA = (cfg_write(0x04, 6) + edu_w(0x80, 0) + edu_w(0x88, 0x40000) + edu_w(0x90, 16) + edu_w(0x98, 1) +
           edu_w(0x80, 0x40000) + edu_w(0x88, 0x1008) + edu_w(0x98, 7))
PCI = {
    'dma_remapped': DMA_TABLES + vtd_w(0x20, 0x1000, 8) + vtd_w(0x18, GCMD_SRTP) + vtd_w(0x18, GCMD_TE) + EDU_DMA +
                    vtd_r(0x34) + vtd_r(0x22C) + vtd_w(0x22C, 1 << 31),
    'dma_untranslated': DMA_TABLES + EDU_DMA,
    'msi_remapped': pci_ram([(0x7000 + 32, 1 | 0x71 << 16), (0x7000 + 40, 0x18 | 1 << 18)]) +
                    vtd_w(0xB8, 0x7000 | 3, 8) + vtd_w(0x18, GCMD_SIRTP) + vtd_w(0x18, GCMD_IRE) +
                    cfg_write(0x44, 0xFEE00050) + cfg_write(0x48, 0) + cfg_write(0x4C, 0) +
                    cfg_write(0x40, 0x10005) + edu_w(0x60, 1) + edu_w(0x64, 1) + edu_w(0x60, 0x100),
    'invalidation_queue': pci_ram([(0x6000, 2 | 1 << 4), (0x6010, 5 | 1 << 4 | 1 << 5 | 0xCAFE << 32),
                                   (0x6018, 0x6800)]) +
                          vtd_w(0x90, 0x6000, 8) + vtd_w(0x18, GCMD_QIE) + vtd_w(0xA0, 0) + vtd_w(0x88, 32, 8) +
                          vtd_r(0x80) + vtd_r(0x9C),
    'intx_config': cfg_write(0x04, 0x406) + edu_w(0x60, 1) + cfg_write(0x3C, 5, 1) + edu_w(0x20, 0x80) +
                   edu_w(0x08, 12) + edu_w(0x64, 0xFFFFFFFF) + cfg_write(0x10, 0xFFFFFFFF),
}


# ---- hpet_fuzz: operations (op byte % 5: 0 write, 1 read, 2/3 time, 4 rebase);
# a register as its index in hpet_fuzz.cc's kRegisters (0 caps, 1 config,
# 2 status, 3 counter, 4 + 3n + k timer n's config/comparator/FSB route) with
# bit 4 for the high half; sizes as log2.
H_CONF, H_STS, H_CTR = 1, 2, 3
def h_timer(n, k): return 4 + 3 * n + k
def h_w(reg, v, size=4, high=False): return u8(0) + u8(reg | (16 if high else 0)) + u8({1: 0, 2: 1, 4: 2, 8: 3}[size]) + val(v)
def h_r(reg, size=4, high=False): return u8(1) + u8(reg | (16 if high else 0)) + u8({1: 0, 2: 1, 4: 2, 8: 3}[size])
def h_time(ns): return u8(2) + u8(2) + u32(ns)          # a 32-bit step
def h_rebase(ns): return u8(4) + u64(ns)
INT, PERIODIC, VALSET, BIT32, LEVEL = 1 << 2, 1 << 3, 1 << 6, 1 << 8, 1 << 1
HPET = {
    # Linux's hpet_set_periodic in legacy replacement mode, then ticks.
    'legacy_periodic': h_w(h_timer(0, 0), INT | PERIODIC | VALSET | BIT32) + h_w(h_timer(0, 1), 100000) +
                       h_w(h_timer(0, 1), 100000) + h_w(H_CONF, 3) + h_time(5000000) + h_r(h_timer(0, 1)) +
                       h_time(3000000) + h_r(H_CTR, 8),
    # A level timer on input 16, its status read and cleared, the block halted.
    'level_route': h_w(h_timer(1, 0), LEVEL | INT | 16 << 9) + h_w(h_timer(1, 1), 1000, 8) + h_w(H_CONF, 1) +
                   h_time(20000) + h_r(H_STS) + h_w(H_STS, 2) + h_w(H_CONF, 0) + h_r(H_CTR),
    # The counter just before the wrap of its low half, a 32-bit one-shot timer, a move between clocks.
    'wrap_rebase': h_w(H_CTR, 0xFFFFF000) + h_w(h_timer(2, 0), INT | BIT32 | 23 << 9) + h_w(h_timer(2, 1), 0x800) +
                   h_w(H_CONF, 1) + h_rebase(1 << 40) + h_time(50000) + h_time(50000) + h_r(H_CTR, 4, high=True),
}


def write(kind, seeds):
    d = os.path.join(HERE, 'corpus', kind)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), 'wb') as f:
            f.write(data)
    print(f'{d}: {len(seeds)} seeds')


write('vpmu', VPMU)
write('completer', COMPLETER)
write('pci', PCI)
write('hpet', HPET)
