; hostile_lbr: garbage in the LBR stack's MSRs (`westmere`: 16 entries, FROM 680H, TO 6C0H, TOS
; 1C9H, format 3). Outcomes (docs/pmu-model.md, "MSRs" and "LBR"):
;  1. TOS is "R/W" (SDM vol. 4 table 2-15): 15 is accepted; 16, 0xFFFFFFFF and 2^32 (EDX = 1) are
;     beyond the stack and #GP; after the faults TOS still reads 15.
;  2. FROM/TO hold what the guest writes, all 64 bits, and read it back (vbts keeps the value;
;     docs/pmu-model.md says why it does not #GP on non-canonical values).
;  3. The stack keeps working: with DEBUGCTL.LBR one jump moves TOS from 15 to 0 (modulo 16) and
;     writes FROM/TO[0] = the jump; the garbage in entry 5 survives.
; Expected: status 1 under vbts; QEMU TCG (no PDCM): SKIP (155).
%include "rt.inc"
%include "debug32.inc"

main:
        mov eax, 1
        call dbg_cpuid32
        test ecx, 1 << 15               ; PDCM
        jz .skip
        mov ecx, 0x345
        rdmsr
        and eax, 0x3F
        cmp eax, 3                      ; the 16-entry Nehalem/Westmere stack
        je .ok
.skip:
        SKIP "LBR: needs PDCM and LBR format 3 (westmere)"
        ret
.ok:
        SET_HANDLER 13, gp_handler
        ; ---- 1. TOS
        WRMSR64 0x1C9, 15, 0
        CHECK_EQ dword [gp_count], 0, "TOS = 15 accepted"
        WRMSR64 0x1C9, 16, 0
        CHECK_EQ dword [gp_count], 1, "TOS = 16: #GP"
        WRMSR64 0x1C9, 0xFFFFFFFF, 0
        CHECK_EQ dword [gp_count], 2, "TOS = 0xFFFFFFFF: #GP"
        WRMSR64 0x1C9, 0, 1
        CHECK_EQ dword [gp_count], 3, "TOS = 2^32: #GP"
        mov ecx, 0x1C9
        rdmsr
        CHECK_EQ eax, 15, "TOS still 15 after the faults"
        ; ---- 2. FROM/TO garbage
        WRMSR64 0x685, 0xDEADBEEF, 0xCAFEBABE
        WRMSR64 0x6C5, 0x12345678, 0x80000000
        CHECK_EQ dword [gp_count], 3, "FROM/TO garbage: accepted"
        mov ecx, 0x685
        rdmsr
        CHECK_EQ eax, 0xDEADBEEF, "FROM[5] reads back (low)"
        CHECK_EQ edx, 0xCAFEBABE, "FROM[5] reads back (high)"
        mov ecx, 0x6C5
        rdmsr
        CHECK_EQ eax, 0x12345678, "TO[5] reads back (low)"
        CHECK_EQ edx, 0x80000000, "TO[5] reads back (high)"
        ; ---- 3. the stack still works
        WRMSR32 MSR_DEBUGCTL, DBG_LBR
j1:     jmp j2
j2:     WRMSR32 MSR_DEBUGCTL, 0
        mov ecx, 0x1C9
        rdmsr
        CHECK_EQ eax, 0, "one jump: TOS 15 -> 0"
        mov ecx, 0x680
        rdmsr
        CHECK_EQ eax, j1, "FROM[0] = the jump"
        mov ecx, 0x6C0
        rdmsr
        CHECK_EQ eax, j2, "TO[0] = its target"
        mov ecx, 0x685
        rdmsr
        CHECK_EQ eax, 0xDEADBEEF, "FROM[5] garbage survives"
        ret

        GP_SKIP_HANDLER                 ; gp_handler: skips the faulting WRMSR

%include "end.inc"
