; lbr_xbp_pm32: the guest's own instruction breakpoints while vbts traces it (the LBRs on):
; lbr_loop_pm32's loop, with DR0 an enabled instruction breakpoint on `never` (an address the
; loop never reaches) all the while, then a call to `target` with DR1 on it. Under the TCG
; engine the breakpoints are QEMU's own: the loop's blocks still run with one hook each
; (docs/tcg-engine.md, "Block-level tracing"; before 2026-11-28 the hook ran before every
; instruction while any was enabled); a breakpoint ends a block before its instruction.
;  - DR7 = L0 | L1, both R/W = 00 (instruction), LEN = 00.
;  - the loop as lbr_loop_pm32: EDI = 0x6aae1200, LBR TOS advanced by 3 499 999 mod 16 = 15,
;    FROM[TOS] = leaf's RET, TO[TOS] = the instruction after the CALL (LBR off after it).
;  - `call target`: one #DB, a fault before target's first instruction (SDM vol. 3B
;    17.3.1.1): frame EIP = target, DR6.B1 (B0 not: the loop never reached `never`); the
;    handler sets RF in the frame, so the IRET runs target's first instruction without a
;    second #DB; target returns 0x600D in EAX.
; Expected: status 1 under vbts (westmere); QEMU TCG has no PDCM: SKIP (155).
%include "rt.inc"
%include "debug32.inc"

main:
        LBR_REQUIRE
        SET_HANDLER 1, db_handler
        mov eax, never
        mov dr0, eax
        mov eax, target
        mov dr1, eax
        mov eax, (1 << 0) | (1 << 2)            ; L0 | L1, instruction breakpoints
        mov dr7, eax
        LBR_LOOP_CHECKED
        CHECK_EQ dword [hits], 0, "no #DB in the loop (DR0's `never` not reached)"
        xor eax, eax
        call target
        CHECK_EQ eax, 0x600D, "target ran after its breakpoint"
        CHECK_EQ dword [hits], 1, "one #DB at target"
        CHECK_EQ dword [db_eip], target, "the #DB's frame EIP = target (a fault before it)"
        CHECK_EQ dword [db_dr6], 2, "DR6.B1 alone"
        xor eax, eax
        mov dr7, eax
        ret

never:  ret

target: mov eax, 0x600D
        ret

; #DB (ebx = frame): counts it, keeps its EIP and DR6[3:0], clears DR6, sets RF in the frame.
db_handler:
        inc dword [hits]
        mov eax, [ebx + F32_EIP]
        mov [db_eip], eax
        mov eax, dr6
        and eax, 0xF
        mov [db_dr6], eax
        mov eax, 0xFFFF0FF0
        mov dr6, eax
        or dword [ebx + F32_EFLAGS], 1 << 16    ; RF
        ret

section .bss
hits:   resd 1
db_eip: resd 1
db_dr6: resd 1

%include "end.inc"
