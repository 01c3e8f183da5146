; exp14_10: book experiment 14-10, BTS buffer full -> DS interrupt, together with PMC0
; counting instructions from 0xFFFFFFFF-7 (SDM vol. 3B 17.4.9.4; 18.2 architectural perfmon).
; Setup (ring 0, IF=1): LVT perfmon = vector 0x50 (fixed); an 8-record BTS buffer in interrupt
; mode (TR|BTS|BTINT) with threshold = absolute maximum; PMC0 = 0xFFFFFFFF-7 (a 32-bit write,
; sign-extended: 0xFFFF_FFFF_FFF8 in 48 bits) counting instructions retired (event C0H, USR|OS|
; INT|EN). Counting starts after the WRMSR of IA32_PERF_GLOBAL_CTRL; then 8 jumps br1..br8.
; Derivation:
;  - the 8th jump (br8 -> br9) is the 8th instruction counted: PMC0 wraps to 0 and sets
;    GLOBAL_STATUS bit 0, and its BTS record is the 8th: index = max = threshold. Both ask for a
;    PMI after that jump: one interrupt, frame EIP = br9.
;  - the handler (book lib/debug.asm style) disables BTS, handles ONE cause per interrupt -
;    counter overflow first (clears it via OVF_CTRL, stops PMC0) - restores DEBUGCTL, unmasks the
;    LVT entry (Intel masks it on delivery), sends EOI and returns. With BTS back on and the
;    buffer still full, the branches of the handler's way out (its RET and the IRET) reach the
;    threshold again: the DS interrupt follows, again at EIP = br9, before br9 runs.
;  - the second interrupt sees GLOBAL_STATUS = 0 and index = max: the DS interrupt; it resets
;    the index to base. Nothing else reaches the threshold: 2 PMIs in all.
;  - records 1..8 (before the reset) are the jumps (brn, brn+1), n = 1..8.
; Expected: status 1 under vbts; QEMU TCG (no DS): SKIP, status 155.
%include "rt.inc"
%include "debug32.inc"

%define PMI_VEC         0x50
%define NREC            8
%define LVT_PERFMON     (LAPIC_BASE + 0x340)
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
        WRMSR32 0x38F, 1                ; PMC0 counts from the next instruction on
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
        CHECK_EQ dword [pmi_eip + 0], br9, "PMI 1 at EIP br9 (after the 8th jump)"
        CHECK_EQ dword [pmi_cause + 0], 1, "PMI 1: PMC0 overflow (GLOBAL_STATUS bit 0)"
        CHECK_EQ dword [pmi_eip + 4], br9, "PMI 2 at the same EIP br9"
        CHECK_EQ dword [pmi_cause + 4], 2, "PMI 2: BTS index reached the threshold"
        mov eax, bts_buffer + NREC * 24
        CHECK_EQ dword [pmi_index + 0], eax, "PMI 1: BTS index = maximum (8 records)"
        CHECK_EQ dword [pmi_index + 4], eax, "PMI 2: BTS index = maximum"
        CHECK_EQ dword [saved_from + 0], br1, "record 1 from br1"
        CHECK_EQ dword [saved_to + 0], br2, "record 1 to br2"
        CHECK_EQ dword [saved_from + 28], br8, "record 8 from br8"
        CHECK_EQ dword [saved_to + 28], br9, "record 8 to br9"
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
