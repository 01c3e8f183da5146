; lbr: the last-branch-record stack (SDM vol. 3B 17.4.8, 17.9; book LBR section), 32-bit ring 0.
; LBR support: CPUID.1:ECX.PDCM and IA32_PERF_CAPABILITIES[5:0] (LBR format) != 0; the stack
; has 16 entries at FROM 680H / TO 6C0H with format 3 (Nehalem/Westmere), 32 with format 5
; (Skylake); TOS is MSR 1C9H. Otherwise SKIP.
;  1. DEBUGCTL.LBR, then N+2 jumps L1..L(N+2) (L(k) -> L(k+1)): TOS advances by N+2, i.e. by 2
;     modulo N; FROM/TO[TOS] = (L(N+2), L(N+3)), FROM/TO[TOS-1] = (L(N+1), L(N+2)); the entry
;     at TOS+1 holds the oldest survivor, jump 3 (L3 -> L4).
;  2. MSR_LBR_SELECT = JCC (bit 2): a taken JE and a JMP: only the JMP is recorded.
;  3. FREEZE_LBRS_ON_PMI with PMC0 = -2 counting instructions (INT): the enabling GLOBAL_CTRL
;     WRMSR is the first counted instruction (a WRMSR retires under the configuration it
;     leaves; it is no branch, so it is not in the LBRs), the second, a jump F1 -> F2,
;     overflows; its record is on top, and nothing of the
;     handler's path is recorded: perfmon v2/v3 (westmere) clear DEBUGCTL.LBR on the PMI
;     (SDM 17.4.7); v4 (skylake) leave it set and set IA32_PERF_GLOBAL_STATUS.LBR_FRZ (bit 58,
;     SDM 18.2.4.1), which the handler clears through GLOBAL_STATUS_RESET (390H) - from then
;     on the LBRs record again (the handler's own path after that point).
;  4. #DB (the guest's own single-step trap) clears DEBUGCTL.LBR and BTF (SDM 17.4.2) and is
;     not recorded.
; Expected: status 1 under vbts (westmere and skylake); QEMU TCG: SKIP (155).
%include "rt.inc"
%include "debug32.inc"


%macro RDMSR_TO 2                       ; RDMSR_TO msr, [dest]: low 32 bits
        mov ecx, %1
        rdmsr
        mov %2, eax
%endmacro

main:
        LBR_REQUIRE                     ; EAX = LBR format
        mov dword [nlbr], 16
        cmp eax, 5
        jb .n_ok
        mov dword [nlbr], 32
.n_ok:
        jmp part1

part1:
        RDMSR_TO 0x1C9, [tos0]
        WRMSR32 MSR_DEBUGCTL, DBG_LBR
        ; N+2 jumps (N = 16 here; a 32-entry stack wraps differently and is checked the same way)
%assign k 1
%rep 34
%assign n k + 1
L%[k]:  jmp L%[n]
%assign k k + 1
%endrep
L35:
        WRMSR32 MSR_DEBUGCTL, 0
        ; 34 jumps: TOS = (tos0 + 34) mod N (N = 16: tos0 + 2)
        mov eax, [tos0]
        add eax, 34
        xor edx, edx
        div dword [nlbr]
        mov [tos_expect], edx
        RDMSR_TO 0x1C9, [tos1]
        call dump_lbr
        CHECK_EQ dword [tos1], dword [tos_expect], "TOS advanced by 34 jumps modulo the stack size"
        mov ebx, [tos1]
        lea ecx, [0x680 + ebx]
        rdmsr
        mov [from_top], eax
        mov ecx, 0x6C0
        add ecx, ebx
        rdmsr
        mov [to_top], eax
        CHECK_EQ dword [from_top], L34, "FROM[TOS] = L34 (the last jump)"
        CHECK_EQ dword [to_top], L35, "TO[TOS] = L35"
        ; oldest survivor at TOS+1: jump 34 - N + 1
        mov eax, ebx
        inc eax
        xor edx, edx
        div dword [nlbr]
        mov ecx, 0x680
        add ecx, edx
        rdmsr
        mov [oldest], eax
        mov eax, 35
        sub eax, [nlbr]                 ; oldest jump number = 34 - N + 1
        mov ecx, L1
        lea eax, [ecx + eax * 2 - 2]    ; L(k) = L1 + 2 (k - 1)
        CHECK_EQ dword [oldest], eax, "FROM[TOS+1] = the oldest surviving jump"

        ; ---- 2. LBR_SELECT: JCC filtered
        WRMSR32 0x1C8, 1 << 2
        RDMSR_TO 0x1C9, [tos0]
        WRMSR32 MSR_DEBUGCTL, DBG_LBR
        xor eax, eax
        je s2                           ; taken JCC: filtered
s2:     jmp s3                          ; recorded
s3:     WRMSR32 MSR_DEBUGCTL, 0
        WRMSR32 0x1C8, 0
        RDMSR_TO 0x1C9, [tos1]
        mov eax, [tos0]
        inc eax
        xor edx, edx
        div dword [nlbr]
        CHECK_EQ dword [tos1], edx, "LBR_SELECT.JCC: only the JMP pushed (TOS + 1)"
        mov ecx, 0x680
        add ecx, [tos1]
        rdmsr
        CHECK_EQ eax, s2, "LBR_SELECT.JCC: FROM[TOS] = the JMP"

        ; ---- 3. FREEZE_LBRS_ON_PMI
        mov eax, 0xA
        call dbg_cpuid32
        movzx eax, al
        mov [pmver], eax
        cmp eax, 2
        jb freeze_done
        SET_HANDLER PMI_VEC, pmi_handler
        APIC_ENABLE
        mov dword [LVT_PERFMON], PMI_VEC
        WRMSR32 0x38F, 0
        WRMSR32 0xC1, 0xFFFFFFFE        ; -2
        WRMSR32 0x186, 0xC0 | (1 << 17) | (1 << 20) | (1 << 22)
        WRMSR32 MSR_DEBUGCTL, DBG_LBR | (1 << 11)
        sti
        WRMSR32 0x38F, 1                ; counted first: -1
F1:     jmp F2                          ; counted second: overflow -> PMI after it
F2:     cli
        WRMSR32 0x38F, 0
        CHECK_EQ dword [pmi_seen], 1, "freeze: the PMI arrived"
        cmp dword [pmver], 4
        jae .v4
        CHECK_EQ dword [pmi_debugctl], 1 << 11, "freeze (v2/v3): DEBUGCTL.LBR cleared by the PMI"
        jmp .frozen
.v4:
        CHECK_EQ dword [pmi_debugctl], (1 << 11) | 1, "freeze (v4): DEBUGCTL.LBR stays set"
        mov eax, [pmi_status_hi]
        and eax, 1 << (58 - 32)
        CHECK_EQ eax, 1 << (58 - 32), "freeze (v4): GLOBAL_STATUS.LBR_FRZ set by the PMI"
        mov ecx, 0x38E
        rdmsr
        and edx, 1 << (58 - 32)
        CHECK_EQ edx, 0, "freeze (v4): LBR_FRZ cleared through GLOBAL_STATUS_RESET"
.frozen:
        CHECK_EQ dword [pmi_top_from], F1, "freeze: FROM[TOS] = the overflowing jump F1"
        CHECK_EQ dword [pmi_top_to], F2, "freeze: TO[TOS] = F2 (handler path not recorded)"
        WRMSR32 MSR_DEBUGCTL, 0
freeze_done:

        ; ---- 4. #DB clears LBR and BTF
        SET_HANDLER 1, db_handler
        RDMSR_TO 0x1C9, [tos0]
        WRMSR32 MSR_DEBUGCTL, DBG_LBR | DBG_BTF
        pushfd
        or dword [esp], 0x100
        popfd
        nop                             ; BTF: no trap after a non-branch
        jmp d2                          ; taken: trap after it
d2:     nop
        CHECK_EQ dword [db_seen], 1, "#DB: one single-step trap (BTF: after the taken jump)"
        CHECK_EQ dword [db_debugctl], 0, "#DB: DEBUGCTL.LBR and BTF cleared"
        RDMSR_TO 0x1C9, [tos1]
        mov eax, [tos0]
        inc eax
        xor edx, edx
        div dword [nlbr]
        CHECK_EQ dword [tos1], edx, "#DB: only the jump pushed, not the #DB"
        ret

; Book-style dump: TOS, then FROM/TO of every entry, newest first.
dump_lbr:
        pushad
        PRINT "LBR: TOS="
        mov ecx, 0x1C9
        rdmsr
        mov esi, eax
        PRINT_DEC
        NEWLINE
        xor edi, edi
.e:
        cmp edi, [nlbr]
        jae .done
        mov eax, esi
        sub eax, edi
        add eax, [nlbr]
        xor edx, edx
        div dword [nlbr]
        mov ebx, edx                    ; entry (TOS - i) mod N
        PRINT "  ["
        mov eax, ebx
        PRINT_DEC
        PRINT "] from="
        lea ecx, [0x680 + ebx]
        rdmsr
        PRINT_HEX32
        PRINT " to="
        lea ecx, [0x6C0 + ebx]
        rdmsr
        PRINT_HEX32
        NEWLINE
        inc edi
        jmp .e
.done:
        popad
        ret

; ebx = frame
pmi_handler:
        inc dword [pmi_seen]
        RDMSR_TO MSR_DEBUGCTL, [pmi_debugctl]
        mov ecx, 0x1C9
        rdmsr
        mov esi, eax
        lea ecx, [0x680 + esi]
        rdmsr
        mov [pmi_top_from], eax
        lea ecx, [0x6C0 + esi]
        rdmsr
        mov [pmi_top_to], eax
        mov ecx, 0x38E
        rdmsr
        mov [pmi_status_hi], edx
        mov ecx, 0x390                  ; reset PMC0's overflow and (v4) LBR_FRZ
        mov eax, 1
        xor edx, edx
        cmp dword [pmver], 4
        jb .reset
        mov edx, 1 << (58 - 32)
.reset:
        wrmsr
        and dword [LVT_PERFMON], ~(1 << 16)
        APIC_EOI
        ret

db_handler:
        inc dword [db_seen]
        RDMSR_TO MSR_DEBUGCTL, [db_debugctl]
        and dword [ebx + F32_EFLAGS], ~0x100     ; stop single-stepping
        ret

section .data
align 4
nlbr:           dd 16
tos0:           dd 0
tos1:           dd 0
tos_expect:     dd 0
from_top:       dd 0
to_top:         dd 0
oldest:         dd 0
pmi_seen:       dd 0
pmi_debugctl:   dd 0
pmi_top_from:   dd 0
pmi_top_to:     dd 0
pmi_status_hi:  dd 0
pmver:          dd 0
db_seen:        dd 0
db_debugctl:    dd 0

%include "end.inc"
