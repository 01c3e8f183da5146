; ldlat_block_pm32: the load-latency event counting, with a PMI, inside a loop's block, as the TCG
; engine runs blocks with one hook each (docs/tcg-engine.md, "Load latency with one hook a
; block": a load above the threshold makes its instruction run again alone, where it is counted;
; the other instructions are counted in bulk). Westmere's MEM_INST_RETIRED.
; LATENCY_ABOVE_THRESHOLD (0BH/10H), Skylake's and Ice Lake's MEM_TRANS_RETIRED.LOAD_LATENCY
; (CDH/01H); the rule (docs/pmu-model.md, "Load latency and data source"): an instruction counts
; once when the slowest of its loads is slower than MSR_PEBS_LD_LAT_THRESHOLD (3F6H), 30 here
; (Linux's `perf mem` default). The model's caches (pmu/cache_model.h): a line touched first while
; the event counts comes from DRAM (200 cycles) and brings the other line of its 128-byte pair
; into the L2 and L3, not into the L1D; an L2 hit takes 12 cycles, an L1D hit 4.
;
; Part 1. PMC0 counts the event (OS, EN, INT), PMC1 INST_RETIRED.ANY_P (C0H, OS, EN); 1000
; iterations of one block:
;     mov eax, [hot]      ; iteration 0: DRAM, counted; then an L1D hit
;     cmpsd               ; reads src + 128 i and dst + 128 i, both DRAM: counted once
;     mov ebx, [esi + 60] ; src + 128 i + 64, the pair of the CMPSD's line: an L2 hit, not counted
;     add esi, 124 / add edi, 124 / inc edx / dec ebp / jnz
; Counted instructions before iteration i's CMPSD: 1 + i. PMC0 starts at 2^48 - 702 (WRMSR of
; 0xFFFFFD42, sign-extended): the 702nd, iteration 700's CMPSD, wraps it to 0, and the PMI comes
; at the boundary after it: frame EIP = after_cmpsd, EDX = 700, ESI = src + 128 x 700 + 4,
; EDI = dst + 128 x 700 + 4. PMC1 then: the WRMSR that set GLOBAL_CTRL (the enabling WRMSR
; counts, docs/pmu-model.md), 700 iterations of 8 and the MOV and CMPSD of iteration 700: 5603;
; the handler's six instructions before its WRMSR that clears GLOBAL_CTRL (not counted) make it
; 5609, and PMC0 stays 0 (the handler only stores before that).
; Part 2. PMC0 again from 0, without INT: `rep movsd` of 64 dwords from src2 (four cold lines:
; the first of each pair from DRAM, the second an L2 hit) is one instruction: PMC0 = 1; then a
; load of src2 + 4 (an L1D hit) adds nothing.
; Expected: status 1 under vbts (westmere, skylake); QEMU TCG's CPU is none of these: SKIP (155).
%include "rt.inc"
%include "debug32.inc"

%define EN_OS           ((1 << 17) | (1 << 22))
%define ITERATIONS      1000
%define PMI_AT          700

main:
        call dbg_core_gen32
        test eax, eax
        jnz .go
        SKIP "the load-latency event (a Westmere, Skylake or Ice Lake model)"
        ret
.go:
        cmp eax, 1
        je .westmere
        mov dword [event], 0x01CD
.westmere:
        RAW_GATE32 PMI_VEC, pmi_raw
        APIC_ENABLE
        mov dword [LVT_PERFMON], PMI_VEC
        WRMSR32 0x38F, 0
        WRMSR32 0x3F6, 30
        WRMSR32 0xC1, 0xFFFFFFFF - (1 + PMI_AT)         ; 2^48 - 702
        WRMSR32 0xC2, 0
        mov eax, [event]
        or eax, EN_OS | (1 << 20)                       ; INT
        xor edx, edx
        mov ecx, 0x186
        wrmsr
        WRMSR32 0x187, 0x00C0 | EN_OS                   ; INST_RETIRED.ANY_P
        mov esi, src
        mov edi, dst
        mov ebp, ITERATIONS
        xor edx, edx
        cld
        sti
        mov ecx, 0x38F
        mov eax, 3                      ; EDX = 0: GLOBAL_CTRL = 3, and the loop's count
        wrmsr
loop_top:
        mov eax, [hot]
        cmpsd
after_cmpsd:
        mov ebx, [esi + 60]
        add esi, 124
        add edi, 124
        inc edx
        dec ebp
        jnz loop_top
        cli
        CHECK_EQ dword [pmi_count], 1, "one PMI"
        CHECK_EQ dword [pmi_status], 1, "GLOBAL_STATUS = PMC0 overflow (bit 0)"
        CHECK_EQ dword [pmi_eip], after_cmpsd, "PMI after the CMPSD that wrapped PMC0 (frame EIP = after_cmpsd)"
        CHECK_EQ dword [pmi_edx], PMI_AT, "PMI in iteration 700 (EDX = 700)"
        CHECK_EQ dword [pmi_esi], src + 128 * PMI_AT + 4, "the CMPSD had completed: ESI = src + 128 x 700 + 4"
        CHECK_EQ dword [pmc0], 0, "PMC0 = 0: nothing counted after the wrap"
        CHECK_EQ dword [pmc1], 5609, "PMC1 = 5609 instructions (1 + 700 x 8 + 2 + the handler's 6)"

        WRMSR32 0xC1, 0
        mov eax, [event]
        or eax, EN_OS                   ; no INT
        xor edx, edx
        mov ecx, 0x186
        wrmsr
        mov esi, src2
        mov edi, dst2
        WRMSR32 0x38F, 1
        mov ecx, 64
        rep movsd
        mov eax, [src2 + 4]
        WRMSR32 0x38F, 0
        mov ecx, 0xC1
        rdmsr
        CHECK_EQ eax, 1, "PMC0 = 1: the REP MOVSD over four cold lines is one instruction"
        ret

; The PMI, straight from the IDT (debug32.inc): it only stores, to `save`, until the counters
; stop.
        PMI_RAW_STOP_HANDLER

section .data
align 4
event:          dd 0x100B
align 128
hot:            dd 0                    ; a 128-byte pair of its own
align 128

section .bss
alignb 4096
src:            resb 128 * ITERATIONS
dst:            resb 128 * ITERATIONS
src2:           resb 256
dst2:           resb 256

%include "end.inc"
