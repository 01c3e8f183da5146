; lbr_loop_pm32: the LBR-only traced-throughput workload of docs/benchmarks.md (the loop of
; traced_loop_pm32 with only DEBUGCTL.LBR on: no BTS, no counters), with its exact results.
; ITER = 1 000 000 iterations of
;   .loop: add edi, ebp | call leaf -> leaf: add edi, 3 | ret | xor edi, 0x55 | test ebp, 1
;          | jz .even | inc edi (odd EBP only) | .even: dec ebp | jnz .loop
; with EBP = ITER down to 1.
;   taken branches = ITER (call) + ITER (ret) + ITER / 2 (jz on even EBP) + ITER - 1 (jnz)
;                  = 3 499 999: LBR TOS = (TOS before + 3 499 999) mod 16 = TOS before + 15 mod 16;
;                  FROM[TOS] = the last taken branch, leaf's RET (the last jz and jnz are not
;                  taken: EBP = 1, then 0), TO[TOS] = the instruction after the CALL.
;   EDI = the loop's checksum, 0x6aae1200 (as traced_loop_pm32).
; Expected: status 1 under vbts (westmere); QEMU TCG has no PDCM: SKIP (155).
%include "rt.inc"
%include "debug32.inc"

%define ITER    1000000

main:
        LBR_REQUIRE
        mov ecx, 0x1C9
        rdmsr
        mov [tos0], eax
        WRMSR32 MSR_DEBUGCTL, DBG_LBR
        mov ebp, ITER
        xor edi, edi
.loop:
        add edi, ebp
        call leaf
.back:  xor edi, 0x55
        test ebp, 1
        jz .even
        inc edi
.even:
        dec ebp
        jnz .loop
        WRMSR32 MSR_DEBUGCTL, 0
        CHECK_EQ edi, 0x6aae1200, "checksum"
        mov ecx, 0x1C9
        rdmsr
        mov [tos], eax
        mov edx, [tos0]
        add edx, 15
        and edx, 15
        CHECK_EQ eax, edx, "LBR TOS advanced by 3 499 999 taken branches modulo 16"
        mov ecx, [tos]
        add ecx, 0x680
        rdmsr
        CHECK_EQ eax, leaf.ret, "LBR FROM[TOS] = leaf's RET"
        mov ecx, [tos]
        add ecx, 0x6C0
        rdmsr
        CHECK_EQ eax, main.back, "LBR TO[TOS] = the instruction after the CALL"
        ret

leaf:   add edi, 3
.ret:   ret

section .bss
tos0:   resd 1
tos:    resd 1

%include "end.inc"
