; pmc: architectural counters counting exactly, with an overflow PMI after an exact instruction
; (SDM vol. 3B 18.2; docs/pmu-model.md "Counters", "The WRMSR itself"). Ring 0, IF=1, LVT
; perfmon = vector 0x50.
; Part 1. PMC0 counts instructions retired (C0H, OS), PMC1 branch instructions retired (C4H, OS,
; INT) from 0xFFFFFFFD (-3, sign-extended to 48 bits), fixed counter 0 instructions (OS|USR).
; FREEZE_PERFMON_ON_PMI stops everything at the PMI (perfmon v3: GLOBAL_CTRL cleared), so the
; handler's own instructions are not counted. The WRMSR of GLOBAL_CTRL that enables the three
; counters is counted by the instruction counters (it retires under the configuration it
; leaves) but is no branch:
;   w wrmsr (instruction 1) | p1 xor | p2 cmp | p3 je (branch 1, not taken) | p4 jmp (branch 2)
;   | p5 nop | p6 jmp (branch 3)
; Branch 3 wraps PMC1 to 0: GLOBAL_STATUS bit 1, PMI with frame EIP = p7. Then PMC0 = FIXED0 =
; 7 (w, p1..p6), PMC1 = 0.
; Part 2 (GLOBAL_CTRL = 0 since the freeze, no PMI): PMC0 alone, from 0:
;   q1 wrmsr GLOBAL_CTRL = 1: enables PMC0, counted -> 1 | mov ecx -> 2 | mov eax -> 3
;   | q2 wrmsr PMC0 = 100 while counting: the WRMSR counts on top of the value it wrote -> 101
;   | nop -> 102 | mov ecx -> 103 | xor eax -> 104 | q3 wrmsr GLOBAL_CTRL = 0: disables PMC0,
;   not counted | nop: not counted. PMC0 = 104.
; Expected: status 1 under vbts (westmere); QEMU TCG reports no arch perfmon (CPUID.0AH version
; < 2): SKIP (155).
%include "rt.inc"
%include "debug32.inc"


main:
        PERFMON_REQUIRE 2, 2, .skip
        and edx, 0x1F
        jz .skip
        jmp .go
.skip:
        SKIP "arch perfmon v2 with 2 GP and 1 fixed counter needed"
        ret
.go:
        SET_HANDLER PMI_VEC, pmi_handler
        APIC_ENABLE
        mov dword [LVT_PERFMON], PMI_VEC
        WRMSR32 0x38F, 0
        WRMSR32 0xC1, 0                                         ; PMC0
        WRMSR32 0xC2, 0xFFFFFFFD                                ; PMC1 = -3
        WRMSR32 0x309, 0                                        ; FIXED_CTR0
        WRMSR32 0x186, 0xC0 | (1 << 17) | (1 << 22)             ; PMC0: instructions, OS, EN
        WRMSR32 0x187, 0xC4 | (1 << 17) | (1 << 20) | (1 << 22) ; PMC1: branches, OS, INT, EN
        WRMSR32 0x38D, 0x3                                      ; FIXED0: OS|USR
        WRMSR32 MSR_DEBUGCTL, 1 << 12                           ; FREEZE_PERFMON_ON_PMI
        sti
        mov ecx, 0x38F
        mov eax, 3
        mov edx, 1                                              ; PMC0, PMC1, FIXED0
w:      wrmsr                                                   ; counted: instruction 1
p1:     xor eax, eax
p2:     cmp eax, 1
p3:     je p5
p4:     jmp p5
p5:     nop
p6:     jmp p7
p7:     cli
        WRMSR32 MSR_DEBUGCTL, 0
        CHECK_EQ dword [pmi_count], 1, "one PMI"
        CHECK_EQ dword [pmi_eip], p7, "PMI after the 3rd branch instruction (frame EIP = p7)"
        CHECK_EQ dword [pmi_status], 2, "GLOBAL_STATUS = PMC1 overflow (bit 1)"
        mov ecx, 0xC1
        rdmsr
        CHECK_EQ eax, 7, "PMC0 = 7 instructions (the enabling WRMSR, p1..p6), frozen at the PMI"
        mov ecx, 0x309
        rdmsr
        CHECK_EQ eax, 7, "FIXED_CTR0 = 7 instructions"
        mov ecx, 0xC2
        rdmsr
        CHECK_EQ eax, 0, "PMC1 wrapped to 0 (3 branch instructions, one not taken)"
        mov ecx, 0x38F
        rdmsr
        CHECK_EQ eax, 0, "GLOBAL_CTRL cleared by the freeze"

        ; ---- part 2: enabling, counter-writing and disabling WRMSRs
        WRMSR32 0x187, 0                                        ; PMC1 off
        WRMSR32 0x38D, 0                                        ; FIXED0 off
        WRMSR32 0xC1, 0                                         ; PMC0 = 0 (not counting)
        mov ecx, 0x38F
        mov eax, 1
        xor edx, edx
q1:     wrmsr                                                   ; enables PMC0: 1
        mov ecx, 0xC1                                           ; 2
        mov eax, 100                                            ; 3
q2:     wrmsr                                                   ; PMC0 = 100, counted: 101
        nop                                                     ; 102
        mov ecx, 0x38F                                          ; 103
        xor eax, eax                                            ; 104
q3:     wrmsr                                                   ; disables PMC0: not counted
        nop
        mov ecx, 0xC1
        rdmsr
        CHECK_EQ eax, 104, "PMC0 = 104: enabling WRMSR counted, written value + its WRMSR, disabling WRMSR not"
        ret

        PMI_RECORD_HANDLER 2

section .data
align 4

%include "end.inc"
