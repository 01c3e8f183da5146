; hostile_bts_index: BTS management fields at their extremes, 32-bit protected mode, the 64-bit DS
; format (DTES64, `westmere`: 8-byte fields even outside IA-32e mode, SDM 17.4.9.2). Outcomes from
; docs/pmu-model.md ("BTS", "Bad guest programming", "Stores that do not land in RAM"):
;  1. index = maximum + 1: outside [base, maximum]: dropped (warning), index kept, buffer untouched.
;  2. index = maximum, circular mode: the next record goes to base (the buffer wraps, 17.4.5).
;  3. interrupt mode, threshold = 2^64 - 1 (above any maximum): the buffer fills (4 records stored,
;     the index stops at the maximum) and no DS interrupt ever comes.
;  4. interrupt mode, index = maximum = 2^64 - 8 - 16 (the last 24 bytes of the 64-bit space do not
;     hold a record), threshold = maximum: the buffer is full, so nothing is stored, and the end of
;     the record that would be stored (index + 24, beyond 2^64) reaches the threshold: one DS
;     interrupt (the handler turns BTS off). The sum must not wrap to a small number.
;  5. 4 GiB wrap: base = 0xFFFFFFF0, index = base + 1 record = 0x1_00000008. Outside IA-32e mode
;     linear addresses are 32 bits (SDM 4.1), so the record lands at linear (= physical) 0x8; the
;     index becomes 0x1_00000020.
;  6. a record straddling 4 GiB (index 0xFFFFFFF8: 8 bytes below 4 GiB, 16 above, wrapping to 0):
;     its first bytes are not RAM, so it is dropped as a whole: nothing written at 0..0x10.
; Expected: status 1 under vbts; QEMU TCG (no DS): SKIP (155).
%include "rt.inc"
%include "debug32.inc"

%define PATTERN         0x5a5a5a5a

; SET_DS64 field, low, high
%macro SET_FIELD 3
        mov dword [dsa + (%1) * 8], %2
        mov dword [dsa + (%1) * 8 + 4], %3
%endmacro

%macro JUMPS 0
        jmp %%a
%%a:    jmp %%b
%%b:    jmp %%c
%%c:    jmp %%d
%%d:    jmp %%e
%%e:    jmp %%f
%%f:
%endmacro

main:
        BTS_REQUIRE
        cmp dword [dbg_fmt64], 1
        je .ok
        SKIP "the 64-bit DS format (DTES64) is needed"
        ret
.ok:
        SET_HANDLER PMI_VEC, pmi_handler
        APIC_ENABLE
        mov dword [LVT_PERFMON], PMI_VEC
        WRMSR32 MSR_DS_AREA, dsa
        ; ---- 1. index = maximum + 1
        mov dword [buf], PATTERN
        SET_FIELD 0, buf, 0
        SET_FIELD 1, buf + 4 * 24 + 1, 0
        SET_FIELD 2, buf + 4 * 24, 0
        SET_FIELD 3, buf + 4 * 24, 0
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS
        JUMPS
        WRMSR32 MSR_DEBUGCTL, 0
        CHECK_EQ dword [dsa + 8], buf + 4 * 24 + 1, "index = maximum + 1: dropped, index kept"
        CHECK_EQ dword [buf], PATTERN, "index = maximum + 1: buffer untouched"
        ; ---- 2. index = maximum, circular
        SET_FIELD 1, buf + 4 * 24, 0
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS
w1:     jmp w2
w2:     WRMSR32 MSR_DEBUGCTL, 0
        CHECK_EQ dword [buf], w1, "index = maximum (circular): the record goes to base"
        CHECK_EQ dword [dsa + 8], buf + 24, "index = maximum (circular): index = base + 1 record"
        ; ---- 3. interrupt mode, threshold 2^64 - 1
        mov dword [pmi_count], 0
        SET_FIELD 1, buf, 0
        SET_FIELD 3, 0xFFFFFFFF, 0xFFFFFFFF
        sti
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS | DBG_BTINT
        JUMPS
        WRMSR32 MSR_DEBUGCTL, 0
        cli
        CHECK_EQ dword [pmi_count], 0, "threshold 2^64-1: no DS interrupt"
        CHECK_EQ dword [dsa + 8], buf + 4 * 24, "threshold 2^64-1: buffer filled, index = maximum"
        CHECK_EQ dword [dsa + 12], 0, "threshold 2^64-1: index high dword 0"
        ; ---- 4. index = maximum at the top of the 64-bit space, interrupt mode
        mov dword [pmi_count], 0
        SET_FIELD 0, 0xFFFFFF00, 0xFFFFFFFF
        SET_FIELD 1, 0xFFFFFFE8, 0xFFFFFFFF
        SET_FIELD 2, 0xFFFFFFE8, 0xFFFFFFFF
        SET_FIELD 3, 0xFFFFFFE8, 0xFFFFFFFF
        sti
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS | DBG_BTINT
top1:   jmp top2
top2:   nop
        cli
        WRMSR32 MSR_DEBUGCTL, 0
        CHECK_EQ dword [pmi_count], 1, "full buffer at the top of the 64-bit space: one DS interrupt"
        CHECK_EQ dword [pmi_eip], top2, "full buffer at the top of the 64-bit space: after the jump"
        CHECK_EQ dword [dsa + 8], 0xFFFFFFE8, "full buffer at the top of the 64-bit space: index kept"
        ; ---- 5. 4 GiB wrap
        mov dword [0x8], 0
        mov dword [0x10], 0
        SET_FIELD 0, 0xFFFFFFF0, 0
        SET_FIELD 1, 0x00000008, 1
        SET_FIELD 2, (0xFFFFFFF0 + 4 * 24) & 0xFFFFFFFF, 0 ; 0x1_00000050: the carry goes to the high dword
        mov dword [dsa + 0x14], 1
        SET_FIELD 3, (0xFFFFFFF0 + 4 * 24) & 0xFFFFFFFF, 0
        mov dword [dsa + 0x1C], 1
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS
g1:     jmp g2
g2:     WRMSR32 MSR_DEBUGCTL, 0
        CHECK_EQ dword [0x8], g1, "4 GiB wrap: record at linear 0x1_00000008 lands at 0x8 (from)"
        CHECK_EQ dword [0x10], g2, "4 GiB wrap: to at 0x10"
        CHECK_EQ dword [dsa + 8], 0x20, "4 GiB wrap: index = 0x1_00000020 (low)"
        CHECK_EQ dword [dsa + 12], 1, "4 GiB wrap: index = 0x1_00000020 (high)"
        ; ---- 6. a record straddling 4 GiB
        mov dword [0x0], PATTERN
        mov dword [0x4], PATTERN
        mov dword [0x8], PATTERN
        mov dword [0xC], PATTERN
        SET_FIELD 1, 0xFFFFFFF8, 0
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS
        jmp .s1
.s1:    WRMSR32 MSR_DEBUGCTL, 0
        CHECK_EQ dword [0x0], PATTERN, "record straddling 4 GiB: dropped, nothing at 0x0"
        CHECK_EQ dword [0xC], PATTERN, "record straddling 4 GiB: dropped, nothing at 0xC"
        CHECK_EQ dword [dsa + 8], 0xFFFFFFF8, "record straddling 4 GiB: index kept"
        ret

; The book's way: BTS off in the handler (it would interrupt again at every branch), unmask, EOI.
pmi_handler:
        inc dword [pmi_count]
        mov eax, [ebx + F32_EIP]
        mov [pmi_eip], eax
        WRMSR32 MSR_DEBUGCTL, 0
        and dword [LVT_PERFMON], ~(1 << 16)
        APIC_EOI
        ret

section .data
align 4
pmi_count:      dd 0
pmi_eip:        dd 0
align 64
dsa:            times 0x60 db 0
align 64
buf:            times 4 * 24 db 0

%include "end.inc"
