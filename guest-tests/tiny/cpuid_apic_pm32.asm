; cpuid_apic_pm32: CPUID.1:EDX.APIC (bit 9) follows IA32_APIC_BASE's global enable (bit 11), as on
; hardware (SDM vol. 2A, CPUID: "APIC On-Chip"; vol. 3A 10.4.3: with the xAPIC globally disabled
; CPUID reports no APIC). kvm-unit-tests' apic.c checks this. Four CPUIDs through the guarded
; dbg_cpuid32 site: enabled (bit 9 = 1), disabled (0), enabled again (1).
; Expected: status 1 under vbts; QEMU 7.2 TCG does not set the bit again after re-enabling (tests.cfg).
%include "rt.inc"
%include "debug32.inc"

main:
        mov eax, 1
        xor ecx, ecx
        call dbg_cpuid32
        and edx, 1 << 9
        CHECK_EQ edx, 1 << 9, "APIC enabled: CPUID.1:EDX.APIC set"
        mov ecx, 0x1B
        rdmsr
        mov [apic_base], eax
        mov [apic_base + 4], edx
        and eax, ~(1 << 11)                     ; global disable
        wrmsr
        mov eax, 1
        xor ecx, ecx
        call dbg_cpuid32
        and edx, 1 << 9
        CHECK_EQ edx, 0, "APIC globally disabled: CPUID.1:EDX.APIC clear"
        mov ecx, 0x1B
        mov eax, [apic_base]
        and eax, ~((1 << 11) | (1 << 10))
        xor edx, edx
        wrmsr                                   ; still disabled (EN=0 -> EN=1 below)
        mov eax, [apic_base]
        mov edx, [apic_base + 4]
        wrmsr                                   ; enabled again, as before
        mov eax, 1
        xor ecx, ecx
        call dbg_cpuid32
        and edx, 1 << 9
        CHECK_EQ edx, 1 << 9, "APIC enabled again: CPUID.1:EDX.APIC set"
        ret

section .data
align 8
apic_base:      dq 0
%include "end.inc"
