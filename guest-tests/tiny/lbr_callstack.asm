; lbr_callstack: the LBR call stack (SDM vol. 3B 17.9, table 17-13: MSR_LBR_SELECT.EN_CALLSTACK,
; bit 9, Haswell and later; docs/pmu-model.md, "LBR call stack"), 32-bit ring 0.
; LBR_SELECT = 0x3C4: EN_CALLSTACK plus the filter the SDM requires (JCC, NEAR_IND_JMP,
; NEAR_REL_JMP and FAR_BRANCH suppressed; calls and returns kept; both CPLs).
;  1. With TOS written to 0: main calls f1, f1 calls f2, f2 takes a JCC and a JMP (filtered),
;     calls f3 and f3 returns. A call pushes, a return pops the record at TOS and clears it:
;     TOS = 2, entry 1 = the call into f1, entry 2 = the call into f2, entry 3 (f2 -> f3,
;     popped) reads 0. Checked inside f2, after f3 returned.
;  2. f2 and f1 return: TOS = 0, entries 1 and 2 read 0.
;  3. Without EN_CALLSTACK (LBR_SELECT = 0x1C4) a return is recorded like a call: one call and
;     its return push two records, TOS = 2, entry 2 = the RET (FROM = f4's RET).
; On a CPU without the call stack (westmere: bit 9 reserved) the WRMSR is a #GP: one PASS
; for the #GP, then SKIP ("SUMMARY: 2 tests, 0 unexpected failures, 1 skipped", status 1).
; QEMU TCG (no PDCM): SKIP (155).
; Expected: status 1 under vbts with --cpu=skylake or icelake-server (11 checks) and on westmere.
%include "rt.inc"
%include "debug32.inc"

%define LBR_SELECT      0x1C8
%define LBR_TOS         0x1C9
%define SEL_CALLSTACK   0x3C4           ; EN_CALLSTACK | FAR | REL_JMP | IND_JMP | JCC
%define SEL_PLAIN       0x1C4           ; the same filter without EN_CALLSTACK

%macro RDMSR_EAX 1                      ; EAX = low 32 bits of MSR %1
        mov ecx, %1
        rdmsr
%endmacro

main:
        LBR_REQUIRE
        SET_HANDLER 13, gp_handler
        WRMSR32 LBR_SELECT, SEL_CALLSTACK
        cmp dword [gp_count], 0
        je .has
        PASS "EN_CALLSTACK is reserved on this CPU: #GP"
        SKIP "LBR call stack: MSR_LBR_SELECT.EN_CALLSTACK is reserved (before Haswell)"
        ret
.has:
        WRMSR32 LBR_TOS, 0
        WRMSR32 MSR_DEBUGCTL, DBG_LBR
call1:  call f1
        ; ---- 2. after f1 returned (f2 returned first)
        WRMSR32 MSR_DEBUGCTL, 0
        RDMSR_EAX LBR_TOS
        CHECK_EQ eax, 0, "2: f2 and f1 returned: TOS back to 0"
        RDMSR_EAX 0x681
        mov esi, eax
        RDMSR_EAX 0x682
        or eax, esi
        CHECK_EQ eax, 0, "2: their records were popped and read 0"
        ; ---- 3. without EN_CALLSTACK
        WRMSR32 LBR_SELECT, SEL_PLAIN
        WRMSR32 LBR_TOS, 0
        WRMSR32 MSR_DEBUGCTL, DBG_LBR
        call f4
        WRMSR32 MSR_DEBUGCTL, 0
        RDMSR_EAX LBR_TOS
        CHECK_EQ eax, 2, "3: plain LBRs: a call and its return are two records"
        RDMSR_EAX 0x682
        CHECK_EQ eax, f4_ret, "3: FROM[2] = f4's RET"
        CHECK_EQ dword [gp_count], 0, "no #GP"
        ret

f1:
call2:  call f2
        ret

f2:
        xor eax, eax
        jz .j                           ; a taken JCC: filtered
.j:     jmp .k                          ; a JMP: filtered
.k:
call3:  call f3
        ; ---- 1. f3 has returned; f1 and f2 have not
        mov ecx, MSR_DEBUGCTL           ; stop recording for the checks (a WRMSR, no branch)
        xor eax, eax
        xor edx, edx
        wrmsr
        RDMSR_EAX LBR_TOS
        CHECK_EQ eax, 2, "1: two calls on the stack (f3's call popped by its return)"
        RDMSR_EAX 0x681
        CHECK_EQ eax, call1, "1: FROM[1] = main's call"
        RDMSR_EAX 0x6C1
        CHECK_EQ eax, f1, "1: TO[1] = f1"
        RDMSR_EAX 0x682
        CHECK_EQ eax, call2, "1: FROM[2] = f1's call"
        RDMSR_EAX 0x6C2
        CHECK_EQ eax, f2, "1: TO[2] = f2"
        RDMSR_EAX 0x683
        mov esi, eax
        RDMSR_EAX 0x6C3
        or eax, esi
        CHECK_EQ eax, 0, "1: entry 3 (f2 -> f3, popped) reads 0"
        WRMSR32 MSR_DEBUGCTL, DBG_LBR   ; record again: the two returns pop
        ret

f3:
        ret

f4:
f4_ret: ret

        GP_SKIP_HANDLER                 ; gp_handler: skips the faulting WRMSR

%include "end.inc"
