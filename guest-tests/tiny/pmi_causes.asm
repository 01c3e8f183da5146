; pmi_causes: the runtime's book-style PMI handler (lib/debug32.inc dbg_pmi32) tells the causes
; of performance-monitoring interrupts apart (SDM vol. 3B 17.4.9.4, 18.2.2, 18.6.1.1), 32-bit
; ring 0, LVT perfmon -> vector 0x50, one PMI per part:
;  A. counter overflow (perfmon v2+): PMC1 = 2^48 - 3 counting instructions with INT; the
;     GLOBAL_CTRL WRMSR that enables it is counted (a WRMSR retires under the configuration it
;     leaves, docs/pmu-model.md): it, a1, a2 count -2, -1, 0: the PMI follows a2, frame EIP =
;     a3; the handler finds GLOBAL_STATUS = bit 1 and classifies "counter overflow" (1).
;  B. BTS threshold: interrupt mode (TR|BTS|BTINT), 8 records, threshold 4: jumps b1..b4 store
;     records 1-4, the 4th reaches the threshold: PMI after b4, frame EIP = b5. BTS is still on
;     until the handler's first WRMSR: the interrupt delivery (record 5), the runtime's stub JMP
;     (6), its taken JZ .same_ring (7) and CALL of the handler (8) fill the buffer - the handler
;     finds index = base + 8 records = the maximum, classifies "BTS threshold" (2) and resets
;     the index; its
;     way out (RET, IRETD) stores 2 records, then b5 -> b6 the 3rd: final index 3 records,
;     record 2 = (b5, b6).
;  C. PEBS buffer (with PEBS): PEBS on PMC0 (INST_RETIRED.ALL from 2^48 - 1, no INT), buffer of
;     4 records, threshold 1 record, reset 2^48 - 1000: the enabling GLOBAL_CTRL WRMSR wraps
;     PMC0 (arms), c1 writes record 1 (EAX = 0x11, RIP = c2) and reaches the threshold: PMI
;     with OvfBuffer, frame EIP = c2; the handler classifies "PEBS buffer" (4) and resets the
;     PEBS index.
; All causes seen: 1|2|4 = 7 (westmere); without perfmon v2 and PEBS (core-duo: 32-bit DS
; format, 12-byte records) only B runs and parts A and C SKIP.
; Expected: status 1 under vbts; QEMU TCG: SKIP (155).
%include "rt.inc"
%include "debug32.inc"


main:
        BTS_REQUIRE
        call dbg_pmu_probe32            ; perfmon version, PEBS
        SET_HANDLER PMI_VEC, dbg_pmi32
        APIC_ENABLE
        mov dword [LAPIC_BASE + 0x340], PMI_VEC
        sti

        ; ---- A. counter overflow
        cmp dword [dbg_perfmon], 2
        jae .a
        SKIP "A: counter overflow needs IA32_PERF_GLOBAL_STATUS (arch perfmon v2)"
        jmp part_b
.a:
        WRMSR32 0x38F, 0
        WRMSR32 0xC2, 0xFFFFFFFF - 2    ; PMC1 = 2^48 - 3
        WRMSR32 0x187, 0xC0 | (1 << 16) | (1 << 17) | (1 << 20) | (1 << 22)
        WRMSR32 0x38F, 2
a1:     nop
a2:     nop
a3:     nop
a4:     WRMSR32 0x38F, 0
        WRMSR32 0x187, 0
        CHECK_EQ dword [dbg_pmi_count], 1, "A: one PMI"
        CHECK_EQ dword [dbg_pmi_causes], 1, "A: cause = counter overflow"
        CHECK_EQ dword [dbg_pmi_status], 2, "A: GLOBAL_STATUS = PMC1 overflow"
        CHECK_EQ dword [dbg_pmi_eip], a3, "A: frame EIP = a3 (after a2; the enabling WRMSR counted)"
        mov ecx, 0x38E
        rdmsr
        CHECK_EQ eax, 0, "A: the handler cleared the overflow bit"

part_b:
        ; ---- B. BTS threshold
        mov dword [dbg_pmi_count], 0
        mov eax, bts_buffer
        mov ecx, 8
        mov edx, 4
        call dbg_ds_init32
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS | DBG_BTINT
b1:     jmp b2
b2:     jmp b3
b3:     jmp b4
b4:     jmp b5
b5:     jmp b6
b6:     WRMSR32 MSR_DEBUGCTL, 0
        mov ecx, 3
        call dbg_dump_bts32
        CHECK_EQ dword [dbg_pmi_count], 1, "B: one PMI"
        CHECK_EQ dword [dbg_pmi_causes], 2, "B: cause = BTS threshold"
        CHECK_EQ dword [dbg_pmi_eip], b5, "B: frame EIP = b5 (after the 4th jump)"
        mov eax, [dbg_rec]
        shl eax, 3
        add eax, bts_buffer
        CHECK_EQ dword [dbg_pmi_bts_index], eax, "B: the handler found index = base + 8 records (4 jumps, delivery, stub JMP, JZ, CALL)"
        mov eax, [dbg_rec]
        imul eax, 3
        add eax, bts_buffer
        mov edx, eax
        mov eax, 1
        call dbg_ds_field32
        CHECK_EQ eax, edx, "B: final index = 3 records (handler RET, IRETD, b5)"
        mov eax, 2
        xor edx, edx
        call dbg_bts_field32
        CHECK_EQ eax, b5, "B: record 2 from b5"
        mov eax, 2
        mov edx, 1
        call dbg_bts_field32
        CHECK_EQ eax, b6, "B: record 2 to b6"

        ; ---- C. PEBS buffer
        cmp dword [dbg_has_pebs], 0
        jne .c
        SKIP "C: no PEBS on this CPU"
        jmp done
.c:
        mov dword [dbg_pmi_count], 0
        mov eax, pebs_buffer
        mov ecx, 4
        mov edx, 1
        mov esi, 0xFFFFFC18             ; reset 2^48 - 1000
        mov edi, 0xFFFF
        call dbg_pebs_init32
        WRMSR32 0x38F, 0
        WRMSR32 0xC1, 0xFFFFFFFF        ; PMC0 = 2^48 - 1
        WRMSR32 0x186, 0xC0 | (1 << 8) | (1 << 16) | (1 << 17) | (1 << 22)
        WRMSR32 0x3F1, 1
        WRMSR32 0x38F, 1
c1:     mov eax, 0x11
c2:     mov eax, 0x22
c3:     WRMSR32 0x38F, 0
        WRMSR32 0x3F1, 0
        WRMSR32 0x186, 0
        CHECK_EQ dword [dbg_pmi_count], 1, "C: one PMI"
        CHECK_EQ dword [dbg_pmi_causes], 4, "C: cause = PEBS buffer (OvfBuffer)"
        CHECK_EQ dword [dbg_pmi_eip], c2, "C: frame EIP = c2 (after the record's instruction c1)"
        mov eax, pebs_buffer
        add eax, [dbg_pebs_rec]
        CHECK_EQ dword [dbg_pmi_pebs_index], eax, "C: the handler found PEBS index = base + 1 record"
        CHECK_EQ dword [dbg_ds_area + 0x28], pebs_buffer, "C: the handler reset the PEBS index"
        CHECK_EQ dword [pebs_buffer + 0x08], c2, "C: record RIP = c2"
        CHECK_EQ dword [pebs_buffer + 0x10], 0x11, "C: record EAX = 0x11"
        CHECK_EQ dword [dbg_pmi_all], 7, "all causes seen: overflow | BTS | PEBS buffer"
done:
        cli
        ret

section .data
align 64
bts_buffer:     times 8 * 24 db 0
align 64
pebs_buffer:    times 4 * 0xC0 db 0

%include "end.inc"
