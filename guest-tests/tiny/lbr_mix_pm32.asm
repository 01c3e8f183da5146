; lbr_mix_pm32: the LBR stack after a mix of transfers, printed whole, for the differential
; test of the two engines (engines.run.lbr_mix_pm32: `vbts run` under --engine=kvm, which
; steps every instruction, and --engine=tcg, which keeps block ends and reports them in
; batches while the LBRs are all that tells branches apart: docs/tcg-engine.md, "Kept block
; ends"). Both must print the same stack. With DEBUGCTL.LBR on (`westmere`: 16 entries):
;   1. 1100 iterations (more than the 1024 ends the TCG engine keeps at once) of: CALL/RET;
;      every 4th iteration INT 0x40 through the runtime's common stub (275 deliveries and
;      IRETs); an indirect JMP through a table, alternating; a REP MOVSB of 5 bytes (its
;      iterations are one instruction, no transfer); a store into the page of the code being
;      run (the engine hands its kept ends over before such a store lands).
;   2. UD2: #UD, whose handler skips it (an exception delivery: LBR entry and LER).
;   3. Ring 3: 50 iterations of CALL/RET and a Jcc, then INT 0x41, whose handler returns to
;      ring 0 (CPL changes end a run of kept ends).
;   4. A JMP the guest rewrites between two calls (smc_lbr_pm32's case, inside a run).
; Then DEBUGCTL = 0 and the dump: TOS, FROM/TO of the 16 entries, LER FROM/TO (1DDH/1DEH).
; Checked here: 275 INT 0x40 deliveries; the ring-3 part returned 7; the rewritten JMP ran
; both ways (1, then 2); EDI = 550 * 1 + 550 * 3 = 2200 (+1 for each even EBP, +3 for each
; odd one); the ring-3 Jcc fell through 25 times (even ECX from 50 down to 2).
; Expected: status 1 under vbts (westmere); QEMU TCG has no LBRs (no PDCM): SKIP (155).
%include "rt.inc"
%include "debug32.inc"

%define ITER    1100
%define UITER   50

main:
        LBR_REQUIRE                     ; EAX = the LBR format
        cmp eax, 3                      ; the 16-entry Nehalem/Westmere stack
        je .ok
        SKIP "LBR: the dump needs LBR format 3 (westmere)"
        ret
.ok:
        SET_HANDLER 0x40, int40_handler
        SET_HANDLER 0x41, int41_handler
        SET_HANDLER 6, ud_handler
        GATE_DPL 0x41, 3
        xor edi, edi
        WRMSR32 MSR_DEBUGCTL, DBG_LBR
        ; ---- 1. the mixed loop
        mov ebp, ITER
.loop:
        call leaf                       ; EDI += 0 (leaf: add edi, 0 / ret)
        test ebp, 3
        jnz .no_int
        int 0x40
.no_int:
        mov eax, ebp
        and eax, 1
        jmp [jtab + eax * 4]
.even:  add edi, 1
        jmp .join
.odd:   add edi, 3
.join:  push edi
        mov esi, src
        mov edi, dst
        mov ecx, 5
        rep movsb
        pop edi
        mov [code_data], ebp            ; a store into this code's page
        dec ebp
        jnz .loop
        ; ---- 2. #UD
        ud2
        ; ---- 3. ring 3
        ENTER_USER user_main, rt_ustack_top
        mov [user_ret], eax
        ; ---- 4. the rewritten JMP
        call patchme                    ; jmp .a: EAX = 1
        mov esi, eax
        mov byte [patchme + 1], patchme.b - (patchme + 2)
        call patchme                    ; jmp .b: EAX = 2
        mov [smc_ret], eax
        WRMSR32 MSR_DEBUGCTL, 0
        ; ---- checks
        CHECK_EQ dword [int_count], ITER / 4, "INT 0x40 delivered every 4th iteration"
        CHECK_EQ dword [user_ret], 7, "ring 3 returned through INT 0x41"
        CHECK_EQ esi, 1, "the first call ran the JMP to .a"
        CHECK_EQ dword [smc_ret], 2, "the second call ran the rewritten JMP to .b"
        CHECK_EQ edi, ITER / 2 * 1 + ITER / 2 * 3, "checksum: 1 per even, 3 per odd iteration"
        CHECK_EQ dword [user_sum], UITER / 2, "ring 3: the Jcc fell through every other iteration"
        ; ---- the dump
        mov ecx, 0x1C9
        rdmsr
        mov [tos], eax
        PRINT "LBR TOS "
        mov eax, [tos]
        PRINT_HEX32
        NEWLINE
        mov dword [idx], 0
.dump:
        PRINT "LBR "
        mov eax, [idx]
        PRINT_HEX32
        PRINT " FROM "
        mov ecx, [idx]
        add ecx, 0x680
        rdmsr
        PRINT_HEX32
        PRINT " TO "
        mov ecx, [idx]
        add ecx, 0x6C0
        rdmsr
        PRINT_HEX32
        NEWLINE
        inc dword [idx]
        cmp dword [idx], 16
        jb .dump
        PRINT "LER FROM "
        mov ecx, 0x1DD
        rdmsr
        PRINT_HEX32
        PRINT " TO "
        mov ecx, 0x1DE
        rdmsr
        PRINT_HEX32
        NEWLINE
        ret

%define LBR_MIX_FRAME_IP dword [ebx + F32_EIP]
%define LBR_MIX_PTR dd
%define LBR_MIX_PTR_SIZE 4
%include "lbr_mix.inc"

%include "end.inc"
