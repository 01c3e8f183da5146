; bts_threshold: the DS-interrupt threshold edge cases of the book (6.5.6 and 9), under the rule
; of docs/pmu-model.md: a PMI when the end of the record being stored reaches the threshold
; (interrupt mode), or when the index steps onto a threshold below the maximum (circular mode).
; The PMI (vector 0x50) enters raw_pmi through its own IDT gate (no common stub) and raw_pmi
; has no branch but its IRETD: while BTS is on every PMI adds exactly 2 branch records, the
; interrupt itself and the IRETD. raw_pmi counts, keeps its return EIP, rewrites DEBUGCTL (0 at
; the call number stop_at, else unchanged), unmasks the LVT entry (Intel masks it on delivery)
; and sends EOI.
;  A. circular (BTINT=0), 4 records, threshold = base + 2 records, 8 jumps A1..A8.
;     A2 steps onto the threshold -> PMI; its 2 records fill slots 2 and 3 and the index
;     returns to base; each further pair of jumps repeats it: 4 PMIs, returning to A3, A5, A7,
;     a_end; final index = base.
;  B. interrupt mode (BTINT=1), 4 records, threshold = maximum + 1 record, 8 jumps B1..B8.
;     B1..B4 fill the buffer; B5 is not stored but reaches the threshold -> PMI; the IRETD (not
;     stored) reaches it again -> the next PMI before B6 runs ("repeated interrupts"). raw_pmi
;     turns BTS off at its 3rd call: 3 PMIs, all returning to B6; index = maximum.
;  C. interrupt mode, threshold = maximum + 2 records, 8 jumps: 4 stored, no PMI.
; Expected: status 1 under vbts; QEMU TCG: SKIP (155).
%include "rt.inc"
%include "debug32.inc"


%macro EIGHT_JUMPS 1                    ; labels %1_1 .. %1_8, then %1_end
%1_1:   jmp %1_2
%1_2:   jmp %1_3
%1_3:   jmp %1_4
%1_4:   jmp %1_5
%1_5:   jmp %1_6
%1_6:   jmp %1_7
%1_7:   jmp %1_8
%1_8:   jmp %1_end
%1_end:
%endmacro

%macro RUN 3                            ; RUN prefix, debugctl, threshold records
        mov dword [pmi_count], 0
        mov eax, bts_buffer
        mov ecx, 4
        mov edx, %3
        call dbg_ds_init32
        mov dword [cur_debugctl], %2
        WRMSR32 MSR_DEBUGCTL, %2
        EIGHT_JUMPS %1
        WRMSR32 MSR_DEBUGCTL, 0
        mov eax, 1
        call dbg_ds_field32
        sub eax, bts_buffer
        xor edx, edx
        div dword [dbg_rec]
        mov [index_records], eax
%endmacro

main:
        BTS_REQUIRE
        RAW_GATE32 PMI_VEC, raw_pmi
        APIC_ENABLE
        mov dword [LVT_PERFMON], PMI_VEC
        sti
        mov dword [stop_at], 0
        RUN a, DBG_TR | DBG_BTS, 2
        CHECK_EQ dword [pmi_count], 4, "A circular, threshold below max: 4 PMIs for 8 jumps"
        CHECK_EQ dword [pmi_eip + 0], a_3, "A: PMI 1 returns to A3"
        CHECK_EQ dword [pmi_eip + 4], a_5, "A: PMI 2 returns to A5"
        CHECK_EQ dword [pmi_eip + 8], a_7, "A: PMI 3 returns to A7"
        CHECK_EQ dword [pmi_eip + 12], a_end, "A: PMI 4 returns to a_end"
        CHECK_EQ dword [index_records], 0, "A: index back at base"
        mov dword [stop_at], 3
        RUN b, DBG_TR | DBG_BTS | DBG_BTINT, 5
        CHECK_EQ dword [pmi_count], 3, "B threshold = max + 1 record: repeated PMIs (3, then BTS off)"
        CHECK_EQ dword [pmi_eip + 0], b_6, "B: PMI 1 returns to B6 (after B5, the first branch once full)"
        CHECK_EQ dword [pmi_eip + 4], b_6, "B: PMI 2 at the same EIP (the IRETD reached the threshold)"
        CHECK_EQ dword [pmi_eip + 8], b_6, "B: PMI 3 at the same EIP"
        CHECK_EQ dword [index_records], 4, "B: index = maximum (4 records)"
        mov dword [stop_at], 0
        RUN c, DBG_TR | DBG_BTS | DBG_BTINT, 6
        CHECK_EQ dword [pmi_count], 0, "C threshold = max + 2 records: no PMI"
        CHECK_EQ dword [index_records], 4, "C: index = maximum (4 records)"
        cli
        ret

raw_pmi:
        push eax
        push ecx
        push edx
        inc dword [pmi_count]
        mov ecx, [pmi_count]
        dec ecx
        and ecx, 7
        mov eax, [esp + 12]             ; frame EIP
        mov [pmi_eip + ecx * 4], eax
        mov eax, [cur_debugctl]
        xor edx, edx
        mov ecx, [pmi_count]
        cmp ecx, [stop_at]
        cmove eax, edx
        mov [cur_debugctl], eax
        mov ecx, MSR_DEBUGCTL
        wrmsr
        mov dword [LVT_PERFMON], PMI_VEC
        mov dword [LAPIC_BASE + LAPIC_EOI], 0
        pop edx
        pop ecx
        pop eax
        iretd

section .data
align 4
pmi_count:      dd 0
stop_at:        dd 0
cur_debugctl:   dd 0
index_records:  dd 0
pmi_eip:        times 8 dd 0

section .bss
alignb 64
bts_buffer:     resb 24 * 8

%include "end.inc"
