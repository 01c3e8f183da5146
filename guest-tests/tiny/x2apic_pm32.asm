; x2apic_pm32: the local APIC's x2APIC mode (SDM vol. 3A 10.12) on a CPU model that has it
; (CPUID.1:ECX.x2APIC[21]: skylake, icelake-server; westmere has not: SKIP).
;   1. IA32_APIC_BASE: EN|EXTD enters x2APIC mode from xAPIC mode (10.12.5); the ID MSR (802H)
;      reads the x2APIC ID = CPUID.0BH:EDX = 0; LDR (80DH) = cluster 0, bit 0 = 1 (10.12.10.2);
;      the version MSR (803H) equals what the MMIO register read before.
;   2. #GP (10.12.1.2): a write of the read-only ID, an MSR without a register (DFR 80EH),
;      a read of write-only EOI (80BH), bits 63:32 set in a TPR write, a SELF IPI with a reserved
;      bit (8);
;      the xAPIC MMIO page is gone (10.12.2): a read of its version register is all ones.
;   3. SELF IPI (83FH) with vector 0x41 and a 64-bit ICR write (830H: fixed, physical, destination
;      0 in bits 63:32) with vector 0x42 each deliver once (EOI through 80BH); ICR reads back.
;   4. Transitions (10.12.5): x2APIC -> xAPIC (EN, no EXTD) is #GP; -> disabled is taken;
;      disabled -> x2APIC is #GP; disabled -> xAPIC is taken, and the MMIO version reads again.
; 13 checks. Expected: status 1 with --cpu=skylake; QEMU TCG's default CPU has no x2APIC: SKIP.
%include "rt.inc"
%include "debug32.inc"

%define MSR_APIC_BASE   0x1B
%define X2(reg)         (0x800 + ((reg) >> 4))
%define BASE_EN         (1 << 11)
%define BASE_EXTD       (1 << 10)

main:
        mov eax, 1
        xor ecx, ecx
        call dbg_cpuid32
        bt ecx, 21
        jc .has
        SKIP "x2APIC: CPUID.1:ECX[21] is clear on this CPU"
        ret
.has:
        SET_HANDLER 13, gp_handler
        SET_HANDLER 0x41, self_ipi_handler
        SET_HANDLER 0x42, icr_ipi_handler
        SET_HANDLER LAPIC_SPURIOUS_VEC, spurious_handler
        APIC_ENABLE
        mov eax, [LAPIC_BASE + LAPIC_VER]
        mov [mmio_version], eax

        ; 1. Into x2APIC mode.
        WRMSR64 MSR_APIC_BASE, 0xFEE00000 | BASE_EN | BASE_EXTD | (1 << 8), 0
        mov ecx, MSR_APIC_BASE
        rdmsr
        and eax, BASE_EN | BASE_EXTD
        CHECK_EQ eax, BASE_EN | BASE_EXTD, "IA32_APIC_BASE: EN and EXTD set (x2APIC mode)"
        mov eax, 0xB
        xor ecx, ecx
        call dbg_cpuid32
        mov esi, edx                    ; CPUID.0BH:EDX = x2APIC ID
        mov ecx, X2(0x20)
        rdmsr
        CHECK_EQ eax, esi, "ID MSR = CPUID.0BH:EDX (the x2APIC ID)"
        mov ecx, X2(0xD0)
        rdmsr
        CHECK_EQ eax, 1, "LDR = cluster 0, member bit 0 (derived from ID 0)"
        mov ecx, X2(0x30)
        rdmsr
        CHECK_EQ eax, dword [mmio_version], "version MSR = the MMIO version register"

        ; 2. #GP cases, then the MMIO page.
        WRMSR64 X2(0x20), 5, 0        ; ID: read only
        WRMSR64 X2(0xE0), 0, 0        ; DFR: not in x2APIC mode
        mov ecx, X2(0xB0)               ; EOI: write only
        rdmsr
        WRMSR64 X2(0x80), 0, 1        ; TPR with bit 32
        WRMSR64 X2(0x3F0), 0x141, 0   ; SELF IPI with bit 8 (reserved: kvm-unit-tests msr.c)
        CHECK_EQ dword [gp_count], 5, "#GP: ID write, DFR, EOI read, bits 63:32, SELF IPI bit 8"
        CHECK_EQ dword [LAPIC_BASE + LAPIC_VER], 0xFFFFFFFF, "the xAPIC MMIO page is gone (reads all ones)"

        ; 3. SELF IPI and the 64-bit ICR.
        sti
        WRMSR64 X2(0x3F0), 0x41, 0
        mov esi, self_ipi_count
        call wait_for_one
        cli
        CHECK_EQ dword [self_ipi_count], 1, "SELF IPI (83FH) delivered vector 0x41 once"
        sti
        WRMSR64 X2(0x300), 0x42, 0    ; fixed, physical, no shorthand, destination 0
        mov esi, icr_ipi_count
        call wait_for_one
        cli
        CHECK_EQ dword [icr_ipi_count], 1, "ICR (830H) to destination 0 delivered vector 0x42 once"
        mov ecx, X2(0x300)
        rdmsr
        CHECK_EQ eax, 0x42, "ICR reads back (low half)"

        ; 4. Transitions.
        mov dword [gp_count], 0
        WRMSR64 MSR_APIC_BASE, 0xFEE00000 | BASE_EN | (1 << 8), 0   ; x2APIC -> xAPIC: #GP
        WRMSR64 MSR_APIC_BASE, 0xFEE00000 | (1 << 8), 0             ; -> disabled
        WRMSR64 MSR_APIC_BASE, 0xFEE00000 | BASE_EN | BASE_EXTD | (1 << 8), 0 ; disabled -> x2APIC: #GP
        WRMSR64 MSR_APIC_BASE, 0xFEE00000 | BASE_EN | (1 << 8), 0   ; disabled -> xAPIC
        CHECK_EQ dword [gp_count], 2, "x2APIC->xAPIC and disabled->x2APIC are #GP"
        mov ecx, MSR_APIC_BASE
        rdmsr
        and eax, BASE_EN | BASE_EXTD
        CHECK_EQ eax, BASE_EN, "back in xAPIC mode through the disabled state"
        mov eax, [LAPIC_BASE + LAPIC_VER]
        CHECK_EQ eax, dword [mmio_version], "the MMIO version register reads again"
        CHECK_EQ dword [spurious_count], 0, "no spurious interrupts"
        ret

; Waits with IF=1 until the dword at [ESI] is non-zero or 10 M TSC ticks have passed: hardware
; (and the TCG engine) delivers at the next instruction; this host's KVM delivers the
; interrupt a WRMSR raised later (docs/tcg-engine.md).
wait_for_one:
        rdtsc
        mov edi, eax
        mov ebx, edx
.loop:  cmp dword [esi], 0
        jne .done
        rdtsc
        sub eax, edi
        sbb edx, ebx
        jnz .done
        cmp eax, 10000000
        jb .loop
.done:  ret

gp_handler:                             ; skip the faulting 2-byte RDMSR/WRMSR
        inc dword [gp_count]
        add dword [ebx + F32_EIP], 2
        ret

self_ipi_handler:
        inc dword [self_ipi_count]
        jmp x2_eoi
icr_ipi_handler:
        inc dword [icr_ipi_count]
x2_eoi: WRMSR64 X2(0xB0), 0, 0
        ret

spurious_handler:
        inc dword [spurious_count]
        ret

section .data
align 4
mmio_version:   dd 0
gp_count:       dd 0
self_ipi_count: dd 0
icr_ipi_count:  dd 0
spurious_count: dd 0

%include "end.inc"
