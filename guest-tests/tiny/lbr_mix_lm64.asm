; lbr_mix_lm64: lbr_mix_pm32 in 64-bit mode (4-level paging, the runtime's identity map):
; the same mix of transfers with DEBUGCTL.LBR on (`westmere`: 16 entries, 64-bit FROM/TO),
; then the whole stack and LER dumped, for engines.run.lbr_mix_lm64, which compares the dump
; of the KVM engine (every instruction stepped) with the TCG engine's (block ends kept and
; reported in batches: docs/tcg-engine.md, "Kept block ends"; in 64-bit mode an end's RIP
; is its linear address).
;   1. 1100 iterations of CALL/RET; INT 0x40 every 4th (275); an indirect JMP through a table;
;      REP MOVSB of 5 bytes; a store into the code's page.
;   2. UD2 (#UD, skipped by its handler).
;   3. Ring 3: 50 iterations of CALL/RET and a Jcc, then INT 0x41 back to ring 0.
;   4. A JMP rewritten between two calls.
; Checked here as in lbr_mix_pm32: 275 deliveries, ring 3 returned 7, the JMP ran both ways,
; RDI = 550 * 1 + 550 * 3 = 2200, the ring-3 Jcc fell through 25 times.
; Expected: status 1 under vbts (westmere); QEMU TCG has no LBRs (no PDCM): SKIP (155).
%define RT_LONG_MODE 1
%include "rt.inc"
%include "debug64.inc"

%define ITER    1100
%define UITER   50

main:
        LBR_REQUIRE64                   ; EAX = the LBR format
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
        WRMSR64 0x1D9, 1                ; DEBUGCTL.LBR
        ; ---- 1. the mixed loop
        mov ebp, ITER
.loop:
        call leaf
        test ebp, 3
        jnz .no_int
        int 0x40
.no_int:
        mov eax, ebp
        and eax, 1
        jmp [jtab + rax * 8]
.even:  add edi, 1
        jmp .join
.odd:   add edi, 3
.join:  push rdi
        mov rsi, src
        mov rdi, dst
        mov ecx, 5
        rep movsb
        pop rdi
        mov [code_data], ebp            ; a store into this code's page
        dec ebp
        jnz .loop
        ; ---- 2. #UD
        ud2
        ; ---- 3. ring 3
        mov r12, rdi
        ENTER_USER user_main, rt_ustack_top
        mov rdi, r12
        mov [user_ret], eax
        ; ---- 4. the rewritten JMP
        call patchme                    ; jmp .a: EAX = 1
        mov esi, eax
        mov byte [patchme + 1], patchme.b - (patchme + 2)
        call patchme                    ; jmp .b: EAX = 2
        mov [smc_ret], eax
        mov r12, rdi
        mov r13, rsi
        WRMSR64 0x1D9, 0
        ; ---- checks
        mov eax, [int_count]
        CHECK_EQ rax, ITER / 4, "INT 0x40 delivered every 4th iteration"
        mov eax, [user_ret]
        CHECK_EQ rax, 7, "ring 3 returned through INT 0x41"
        CHECK_EQ r13, 1, "the first call ran the JMP to .a"
        mov eax, [smc_ret]
        CHECK_EQ rax, 2, "the second call ran the rewritten JMP to .b"
        CHECK_EQ r12, ITER / 2 * 1 + ITER / 2 * 3, "checksum: 1 per even, 3 per odd iteration"
        mov eax, [user_sum]
        CHECK_EQ rax, UITER / 2, "ring 3: the Jcc fell through every other iteration"
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
        call msr64
        PRINT_HEX64
        PRINT " TO "
        mov ecx, [idx]
        add ecx, 0x6C0
        call msr64
        PRINT_HEX64
        NEWLINE
        inc dword [idx]
        cmp dword [idx], 16
        jb .dump
        PRINT "LER FROM "
        mov ecx, 0x1DD
        call msr64
        PRINT_HEX64
        PRINT " TO "
        mov ecx, 0x1DE
        call msr64
        PRINT_HEX64
        NEWLINE
        ret

; RAX = MSR ECX, all 64 bits.
msr64:  rdmsr
        shl rdx, 32
        or rax, rdx
        ret

%define LBR_MIX_FRAME_IP qword [rbx + F64_RIP]
%define LBR_MIX_PTR dq
%define LBR_MIX_PTR_SIZE 8
%include "lbr_mix.inc"

%include "end.inc"
