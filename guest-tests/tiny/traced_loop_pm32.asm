; traced_loop_pm32: the traced-throughput workload of docs/benchmarks.md, with its exact results.
; BTS (circular, 100 records), LBR and two counters on - PMC0: instructions retired (C0H, OS),
; PMC1: branch instructions retired (C4H, OS) - over ITER = 1 000 000 iterations of
;   .loop: add edi, ebp | call leaf -> leaf: add edi, 3 | ret | xor edi, 0x55 | test ebp, 1
;          | jz .even | inc edi (odd EBP only) | .even: dec ebp | jnz .loop
; with EBP = ITER down to 1: 9 instructions an iteration, 10 when EBP is odd (500 000 times).
; Derived counts (docs/pmu-model.md "The WRMSR itself": the WRMSR of GLOBAL_CTRL that enables
; both counters is counted by PMC0, the one that disables them is not, neither is a branch):
;   PMC0 = 1 (enabling WRMSR) + 2 (mov ebp, xor edi) + 9 * ITER + ITER / 2 (inc)
;          + 3 (mov ecx, mov eax, xor edx before the disabling WRMSR) = 9 500 006
;   PMC1 = 4 * ITER (call, ret, jz, jnz) = 4 000 000
;   taken branches = ITER (call) + ITER (ret) + ITER / 2 (jz on even EBP) + ITER - 1 (jnz)
;                  = 3 499 999: BTS index = base + (3 499 999 mod 100) records = base + 99 records;
;                  LBR TOS = 3 499 999 mod 16 = 15 (TOS starts at 0), FROM[TOS] = the last
;                  taken branch, leaf's RET (the last jz and jnz are not taken: EBP = 1, then 0).
;   EDI = the loop's checksum, 0x6aae1200 (a Python model of the loop).
; Expected: status 1 under vbts (westmere); QEMU TCG has no DS: SKIP (155).
%include "rt.inc"
%include "debug32.inc"

%define ITER    1000000
%define NREC    100

main:
        BTS_REQUIRE
        mov eax, bts_buffer
        mov ecx, NREC
        mov edx, NREC                   ; threshold = maximum: circular, no interrupt
        call dbg_ds_init32
        WRMSR32 0x38F, 0
        WRMSR32 0xC1, 0
        WRMSR32 0xC2, 0
        WRMSR32 0x186, 0xC0 | (1 << 17) | (1 << 22)
        WRMSR32 0x187, 0xC4 | (1 << 17) | (1 << 22)
        WRMSR32 MSR_DEBUGCTL, DBG_LBR | DBG_TR | DBG_BTS
        WRMSR32 0x38F, 3                ; counted: 1
        mov ebp, ITER                   ; 2
        xor edi, edi                    ; 3
.loop:
        add edi, ebp
        call leaf
        xor edi, 0x55
        test ebp, 1
        jz .even
        inc edi
.even:
        dec ebp
        jnz .loop
        WRMSR32 0x38F, 0                ; its mov ecx, mov eax, xor edx: counted; the WRMSR: not
        WRMSR32 MSR_DEBUGCTL, 0
        CHECK_EQ edi, 0x6aae1200, "checksum"
        mov ecx, 0xC1
        rdmsr
        CHECK_EQ eax, 9500006, "PMC0 = 9 500 006 instructions"
        mov ecx, 0xC2
        rdmsr
        CHECK_EQ eax, 4000000, "PMC1 = 4 000 000 branch instructions"
        mov eax, 1
        call dbg_ds_field32
        mov edx, [dbg_rec]
        imul edx, edx, 99
        add edx, bts_buffer
        CHECK_EQ eax, edx, "BTS index = base + 99 records"
        mov ecx, 0x1C9
        rdmsr
        CHECK_EQ eax, 15, "LBR TOS = 15"
        mov ecx, 0x680 + 15
        rdmsr
        CHECK_EQ eax, leaf.ret, "LBR FROM[TOS] = leaf's RET"
        ret

leaf:   add edi, 3
.ret:   ret

section .bss
alignb 64
bts_buffer:     resb 24 * NREC

%include "end.inc"
