; exp14_10: book experiment 14-10, BTS buffer full -> DS interrupt, together with PMC0
; counting instructions from 0xFFFFFFFF-7 (SDM vol. 3B 17.4.9.4; 18.2 architectural perfmon).
; Setup (ring 0, IF=1): LVT perfmon = vector 0x50 (fixed); an 8-record BTS buffer in interrupt
; mode (TR|BTS|BTINT) with threshold = absolute maximum; PMC0 = 0xFFFFFFFF-7 (a 32-bit write,
; sign-extended: 0xFFFF_FFFF_FFF8 = -8 in 48 bits) counting instructions retired (event C0H,
; USR|OS|INT|EN). The WRMSR of IA32_PERF_GLOBAL_CTRL enables counting and is itself counted (it
; retires under the configuration it leaves, docs/pmu-model.md); then 8 jumps br1..br8.
; Derivation (as the book observed on a Westmere: the PMI "at the 8th jmp"):
;  - counted instructions: 1 the enabling WRMSR (-8 -> -7), 2..8 the jumps br1..br7 (-> 0): br7
;    is the 8th counted instruction; PMC0 wraps to 0, sets GLOBAL_STATUS bit 0 and asks for a
;    PMI after br7: interrupt delivery before br8 runs, frame EIP = br8.
;  - BTS: records 1..7 are the jumps (brn, brn+1), n = 1..7; record 8 is that delivery, from br8
;    (the interrupted instruction, SDM 17.4.8.1) to the vector's entry rt_stub32_80. It fills the
;    buffer: index = max = threshold asks for a PMI too, but the LVT entry is masked by the
;    delivery (Intel masks it): dropped, as are the requests of the stub's JMP, JZ and CALL
;    (not stored: the buffer is full) before the handler turns BTS off.
;  - the handler (book lib/debug.asm style) disables BTS, handles ONE cause per interrupt -
;    counter overflow first (clears it via OVF_CTRL, stops PMC0) - restores DEBUGCTL, unmasks the
;    LVT entry, sends EOI and returns. With BTS back on and the buffer still full, the branches
;    of its way out (CALL/RET of the EOI routine, its RET, the IRETD) reach the threshold again:
;    the DS interrupt follows, again at EIP = br8, before br8 runs.
;  - the second interrupt sees GLOBAL_STATUS = 0 and index = max: the DS interrupt; it saves the
;    records and resets the index to base. Its way out stores 4 records, br8 the 5th: below the
;    threshold, 2 PMIs in all. (The book runs 11 jumps; here jumps 9..11 would be records 6..8
;    of the reset buffer and raise a third PMI, so the image stops after br8.)
; Expected: status 1 under vbts; QEMU TCG (no DS): SKIP, status 155.
%include "rt.inc"
%include "debug32.inc"

%define NREC            8
%define EVT_INSN        (0xC0 | (1 << 16) | (1 << 17) | (1 << 20) | (1 << 22))

main:
        BTS_REQUIRE
        mov eax, 0xA
        call dbg_cpuid32
        cmp al, 2                       ; IA32_PERF_GLOBAL_* need arch perfmon v2
        jae .perfmon_ok
        SKIP "arch perfmon version < 2 (no IA32_PERF_GLOBAL_STATUS)"
        ret
.perfmon_ok:
        SET_HANDLER PMI_VEC, pmi_handler
        APIC_ENABLE
        mov dword [LVT_PERFMON], PMI_VEC
        mov eax, bts_buffer
        mov ecx, NREC
        mov edx, NREC                   ; threshold = absolute maximum
        call dbg_ds_init32
        WRMSR32 0x38F, 0                ; GLOBAL_CTRL: nothing counts yet
        WRMSR32 0xC1, 0xFFFFFFFF - 7    ; PMC0
        WRMSR32 0x186, EVT_INSN
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS | DBG_BTINT
        sti
        WRMSR32 0x38F, 1                ; PMC0 counts from this WRMSR on: it is the 1st
br1:     jmp br2
br2:     jmp br3
br3:     jmp br4
br4:     jmp br5
br5:     jmp br6
br6:     jmp br7
br7:     jmp br8
br8:     jmp br9
br9:     cli
        WRMSR32 MSR_DEBUGCTL, 0
        WRMSR32 0x38F, 0
        CHECK_EQ dword [pmi_count], 2, "two PMIs: counter overflow, then DS buffer full"
        CHECK_EQ dword [pmi_eip + 0], br8, "PMI 1 at EIP br8 (the WRMSR and 7 jumps counted)"
        CHECK_EQ dword [pmi_cause + 0], 1, "PMI 1: PMC0 overflow (GLOBAL_STATUS bit 0)"
        CHECK_EQ dword [pmi_eip + 4], br8, "PMI 2 at the same EIP br8"
        CHECK_EQ dword [pmi_cause + 4], 2, "PMI 2: BTS index reached the threshold"
        mov eax, bts_buffer + NREC * 24
        CHECK_EQ dword [pmi_index + 0], eax, "PMI 1: BTS index = maximum (8 records)"
        CHECK_EQ dword [pmi_index + 4], eax, "PMI 2: BTS index = maximum"
        CHECK_EQ dword [saved_from + 0], br1, "record 1 from br1"
        CHECK_EQ dword [saved_to + 0], br2, "record 1 to br2"
        CHECK_EQ dword [saved_from + 24], br7, "record 7 from br7"
        CHECK_EQ dword [saved_to + 24], br8, "record 7 to br8"
        CHECK_EQ dword [saved_from + 28], br8, "record 8: the PMI delivery from br8 (the 8th jump)"
        CHECK_EQ dword [saved_to + 28], rt_stub32_80, "record 8: to the entry of vector 0x50"
        mov ecx, 0xC1
        rdmsr
        CHECK_EQ eax, dword [pmc0_at_stop], "PMC0 stopped by the first handler"
        ret

; ebx = frame (idt32.inc). One cause per interrupt, counter overflow first.
pmi_handler:
        WRMSR32 MSR_DEBUGCTL, 0         ; BTS off while we look
        mov esi, [pmi_count]
        inc dword [pmi_count]
        cmp esi, 4
        jae .classify
        mov eax, [ebx + F32_EIP]
        mov [pmi_eip + esi * 4], eax
        mov eax, 1
        call dbg_ds_field32
        mov [pmi_index + esi * 4], eax
.classify:
        mov ecx, 0x38E                  ; IA32_PERF_GLOBAL_STATUS
        rdmsr
        test eax, 1
        jz .not_ovf
        mov dword [pmi_cause + esi * 4], 1
        WRMSR32 0x38F, 0                ; stop PMC0
        WRMSR32 0x390, 1                ; clear its overflow bit
        mov ecx, 0xC1
        rdmsr
        mov [pmc0_at_stop], eax
        jmp .restore
.not_ovf:
        mov eax, 1
        call dbg_ds_field32
        push eax
        mov eax, 3
        call dbg_ds_field32
        pop edx
        cmp edx, eax
        jb .restore                     ; neither: spurious
        mov dword [pmi_cause + esi * 4], 2
        ; save the 8 records, then reset the index to base (book: "reset the BTS index")
        xor edi, edi
.save:
        mov eax, edi
        xor edx, edx
        call dbg_bts_field32
        mov [saved_from + edi * 4], eax
        mov eax, edi
        mov edx, 1
        call dbg_bts_field32
        mov [saved_to + edi * 4], eax
        inc edi
        cmp edi, NREC
        jb .save
        mov ecx, NREC
        call dbg_dump_bts32
        mov eax, [dbg_base]
        mov edx, [dbg_fw]
        mov [dbg_ds_area + edx], eax    ; index = base
.restore:
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS | DBG_BTINT
        and dword [LVT_PERFMON], ~(1 << 16)
        APIC_EOI
        ret

section .data
align 4
pmi_count:      dd 0
pmi_eip:        times 4 dd 0
pmi_cause:      times 4 dd 0
pmi_index:      times 4 dd 0
saved_from:     times NREC dd 0
saved_to:       times NREC dd 0
pmc0_at_stop:   dd 0

section .bss
alignb 64
bts_buffer:     resb 24 * NREC

%include "end.inc"
