; llc_block_pm32: an LLC-reference counter's PMI raised by the first of two data accesses of one
; instruction in the middle of a loop's block, as the TCG engine runs blocks with one hook each
; (docs/tcg-engine.md, "Watched accesses": the instruction is run again alone, the accesses it
; made before not counted again). Westmere's caches as in llc.asm (pmu/cache_model.h): every
; line touched first while an LLC event counts misses the L2 and the LLC; a miss brings in the
; other line of its 128-byte pair, uncounted; lines in the L2 are not LLC references.
;
; PMC0 counts LLC references (OS, EN, INT), PMC1 LLC misses (OS, EN), with no freeze: the
; accesses after the overflow count until the PMI handler turns the counters off. With
; GLOBAL_CTRL = 3 and before the loop, one load of `save` (1 reference, a miss; the handler's
; stores there later hit the L2). Then 1000 iterations of one block:
;     mov eax, [hot]      ; iteration 0: 1 reference (miss); then an L2 hit
;     movsd               ; reads src + 128 i, writes dst + 128 i: 2 references (misses)
;     add esi, 124 / add edi, 124 / inc edx / dec ebp / jnz
; References before iteration i's MOVSD: 2 + 2 i. PMC0 starts at 2^48 - 1403 (WRMSR of
; 0xFFFFFA85, sign-extended): reference 1403, the read of iteration 700's MOVSD, wraps it to 0
; and makes the PMI due; the MOVSD's write counts (PMC0 = 1), and the PMI comes at the
; boundary after the MOVSD (the engine's tests TcgDueAccessTest check that the instruction's run
; alone reports no access twice; here a second look at the read would hit the L2 anyway):
; frame EIP = after_movsd, EDX = 700 (the INCs of iterations 0-699), ESI = src + 128 x 700 + 4
; and EDI = dst + 128 x 700 + 4 (the MOVSD has completed). The handler (a raw gate) saves EAX,
; ECX, EDX in `save` and clears GLOBAL_CTRL before any other access: afterwards PMC0 = 1 and
; PMC1 = 1404 (every reference was a miss: 1402 + the MOVSD's two).
; Expected: status 1 under vbts (westmere); QEMU TCG reports no arch perfmon: SKIP (155).
%include "rt.inc"
%include "debug32.inc"

%define EN_OS           ((1 << 17) | (1 << 22))
%define ITERATIONS      1000
%define PMI_AT          700

main:
        LLC_REQUIRE
        RAW_GATE32 PMI_VEC, pmi_raw
        APIC_ENABLE
        mov dword [LVT_PERFMON], PMI_VEC
        WRMSR32 0x38F, 0
        WRMSR32 0xC1, 0xFFFFFFFF - (2 + 2 * PMI_AT)     ; 2^48 - 1403
        WRMSR32 0xC2, 0
        WRMSR32 0x186, 0x4F2E | EN_OS | (1 << 20)       ; LLC references, INT
        WRMSR32 0x187, 0x412E | EN_OS                   ; LLC misses
        mov esi, src
        mov edi, dst
        mov ebp, ITERATIONS
        xor edx, edx
        cld
        sti
        mov ecx, 0x38F
        mov eax, 3                      ; EDX = 0: GLOBAL_CTRL = 3, and the loop's count
        wrmsr
        mov eax, [save]                 ; reference 1: `save` into the L2
loop_top:
        mov eax, [hot]
        movsd
after_movsd:
        add esi, 124
        add edi, 124
        inc edx
        dec ebp
        jnz loop_top
        cli
        CHECK_EQ dword [pmi_count], 1, "one PMI"
        CHECK_EQ dword [pmi_status], 1, "GLOBAL_STATUS = PMC0 overflow (bit 0)"
        CHECK_EQ dword [pmi_eip], after_movsd, "PMI after the MOVSD whose read overflowed PMC0 (frame EIP = after_movsd)"
        CHECK_EQ dword [pmi_edx], PMI_AT, "PMI in iteration 700 (EDX = 700)"
        CHECK_EQ dword [pmi_esi], src + 128 * PMI_AT + 4, "the MOVSD had completed: ESI = src + 128 x 700 + 4"
        CHECK_EQ dword [pmi_edi], dst + 128 * PMI_AT + 4, "the MOVSD had completed: EDI = dst + 128 x 700 + 4"
        CHECK_EQ dword [pmc0], 1, "PMC0 = 1: the MOVSD's write counted after the wrap"
        CHECK_EQ dword [pmc1], 1404, "PMC1 = 1404 LLC misses (1402 + the MOVSD's two)"
        ret

; The PMI, straight from the IDT (debug32.inc): it only stores, to `save`, until the counters
; stop.
        PMI_RAW_STOP_HANDLER

section .data
align 128
hot:            dd 0                    ; a 128-byte pair of its own
align 128

section .bss
alignb 4096
src:            resb 128 * ITERATIONS
dst:            resb 128 * ITERATIONS

%include "end.inc"
