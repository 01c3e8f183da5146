; llc: the architectural LLC Reference (2EH/4FH) and LLC Misses (2EH/41H) events counting data
; accesses through the CPU model's caches (pmu/cache_model.h; docs/pmu-model.md "LLC references
; and misses"). Westmere: 256 KB 8-way L2, 12 MB 16-way L3, 64-byte lines, and the L2 spatial
; prefetcher: a miss also brings in the other line of its 128-byte pair, uncounted. The model
; sees only accesses made while an LLC event counts, so every line of `buf` is cold at first.
; PMC0 counts LLC references, PMC1 LLC misses (OS, EN); GLOBAL_CTRL = 3 enables both around each
; window, whose only data accesses are the loads shown (WRMSR, register moves, DEC/JNZ access no
; memory):
;   w1: 64 loads, one per line, over the 4 KB at buf: lines 0,2,4.. miss both levels and bring
;       in 1,3,5..; those hit L2 -> refs 32, misses 32
;   w2: the same 64 loads again: all in L2 (64 lines of 4096) -> +0, +0
;   w3: 32 loads 128 bytes apart over the next 4 KB: each misses (its pair's other line is
;       brought in, not loaded) -> refs 64, misses 64
;   w4: the 32 other lines of w3's pairs: prefetched, all hit L2 -> +0, +0
;   w5: PMC1 = 2^48 - 1 (WRMSR of 0xFFFFFFFF, sign-extended) with INT: the first load of a new
;       line wraps it: PMI (LVT vector 0x50), frame EIP = the instruction after the load (w5_next),
;       GLOBAL_STATUS = 2 (PMC1); FREEZE_PERFMON_ON_PMI clears GLOBAL_CTRL at the PMI, so the
;       handler's accesses are not counted: PMC1 = 0, PMC0 = 65.
; Expected: status 1 under vbts (westmere); QEMU TCG reports no arch perfmon: SKIP (155).
%include "rt.inc"
%include "debug32.inc"

%define EN_OS           ((1 << 17) | (1 << 22))

; Loads from esi, esi+stride, ... (count loads) with PMC0/PMC1 enabled around them.
%macro WINDOW 2 ; count, stride
        mov ebx, %1
        mov ecx, 0x38F
        mov eax, 3
        xor edx, edx
        wrmsr
%%loop: mov eax, [esi]
        add esi, %2
        dec ebx
        jnz %%loop
        xor eax, eax
        wrmsr
%endmacro

main:
        LLC_REQUIRE
        SET_HANDLER PMI_VEC, pmi_handler
        APIC_ENABLE
        mov dword [LVT_PERFMON], PMI_VEC
        WRMSR32 0x38F, 0
        WRMSR32 0xC1, 0
        WRMSR32 0xC2, 0
        WRMSR32 0x186, 0x4F2E | EN_OS
        WRMSR32 0x187, 0x412E | EN_OS
        mov esi, buf
        WINDOW 64, 64
        call read_counters
        CHECK_EQ dword [refs], 32, "w1: 64 lines, 32 LLC references (the other 32 prefetched as pairs)"
        CHECK_EQ dword [misses], 32, "w1: 32 LLC misses"
        mov esi, buf
        WINDOW 64, 64
        call read_counters
        CHECK_EQ dword [refs], 32, "w2: the same lines again hit L2: still 32 references"
        CHECK_EQ dword [misses], 32, "w2: still 32 misses"
        mov esi, buf + 4096
        WINDOW 32, 128
        call read_counters
        CHECK_EQ dword [refs], 64, "w3: 32 loads 128 bytes apart: 64 references"
        CHECK_EQ dword [misses], 64, "w3: 64 misses"
        mov esi, buf + 4096 + 64
        WINDOW 32, 128
        call read_counters
        CHECK_EQ dword [refs], 64, "w4: the prefetched other lines hit L2: 64 references"
        CHECK_EQ dword [misses], 64, "w4: 64 misses"
        ; w5: the overflow PMI.
        WRMSR32 0xC2, 0xFFFFFFFF
        WRMSR32 0x187, 0x412E | EN_OS | (1 << 20)
        WRMSR32 MSR_DEBUGCTL, 1 << 12                           ; FREEZE_PERFMON_ON_PMI
        mov esi, buf + 8192
        sti
        mov ecx, 0x38F
        mov eax, 3
        xor edx, edx
        wrmsr
        mov eax, [esi]
w5_next:
        nop
        xor eax, eax
        wrmsr
        cli
        WRMSR32 MSR_DEBUGCTL, 0
        CHECK_EQ dword [pmi_count], 1, "w5: one PMI"
        CHECK_EQ dword [pmi_eip], w5_next, "w5: PMI after the load that missed (frame EIP = w5_next)"
        CHECK_EQ dword [pmi_status], 2, "w5: GLOBAL_STATUS = PMC1 overflow (bit 1)"
        call read_counters
        CHECK_EQ dword [refs], 65, "w5: PMC0 = 65"
        CHECK_EQ dword [misses], 0, "w5: PMC1 wrapped to 0"
        ret

read_counters:
        mov ecx, 0xC1
        rdmsr
        mov [refs], eax
        mov ecx, 0xC2
        rdmsr
        mov [misses], eax
        ret

        PMI_RECORD_HANDLER 2

section .data
align 4
refs:           dd 0
misses:         dd 0

section .bss
alignb 4096
buf:            resb 3 * 4096

%include "end.inc"
