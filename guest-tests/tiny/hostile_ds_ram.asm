; hostile_ds_ram: IA32_DS_AREA, the BTS buffer and the PEBS buffer pointed at memory that is not
; RAM: the local APIC page (0xFEE00000), the first byte beyond the end of RAM, and ranges that
; straddle the end of RAM. Run with --mem=2M (tests.cfg), so RAM ends at E = 0x200000, right
; above the image. docs/pmu-model.md ("Bad guest programming", "Stores that do not land in RAM")
; defines each outcome: a DS save area that cannot be read in full, or a record that cannot be
; written in full, is dropped as a whole (one vbts warning on stderr each, the guest runs on):
; no byte of it is written, the index keeps its value, nothing reaches the LAPIC (its TPR stays
; 0), and a PEBS assist is skipped (the counter's overflow bit stays set, no reload, index kept).
; A record that ends exactly at E is stored: the last byte of RAM is RAM.
; Uses the 64-bit DS format (DTES64, `westmere`); SKIPs without BTS, DTES64 or a 2 MiB RAM.
; Expected: status 1 under vbts; QEMU TCG (no DS): SKIP (155).
%include "rt.inc"
%include "debug32.inc"

%define RAM_END      0x200000
%define APIC_TPR     (LAPIC_BASE + 0x80)
%define PATTERN      0x5a5a5a5a

; SET_DS base, index, max, threshold: the BTS fields of `dsa` (low dwords; upper dwords 0),
; IA32_DS_AREA = dsa. Clobbers EAX, ECX, EDX.
%macro SET_DS 4
        mov dword [dsa + 0x00], %1
        mov dword [dsa + 0x08], %2
        mov dword [dsa + 0x10], %3
        mov dword [dsa + 0x18], %4
        WRMSR32 MSR_DS_AREA, dsa
%endmacro

; BRANCHES: BTS on (circular), three taken jumps, BTS off. Clobbers EAX, ECX, EDX.
%macro BRANCHES 0
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS
        jmp %%a
%%a:    jmp %%b
%%b:    jmp %%c
%%c:    WRMSR32 MSR_DEBUGCTL, 0
%endmacro

main:
        BTS_REQUIRE
        cmp dword [dbg_fmt64], 1
        je .fmt_ok
        SKIP "the 64-bit DS format (DTES64) is needed"
        ret
.fmt_ok:
        mov ebx, [rt_mb_info]
        mov eax, [ebx + MBI_MEM_UPPER]
        shl eax, 10
        add eax, 0x100000
        cmp eax, RAM_END
        je .mem_ok
        SKIP "run with --mem=2M (RAM must end at 0x200000)"
        ret
.mem_ok:
        APIC_ENABLE
        ; ---- 1. IA32_DS_AREA = the LAPIC page
        WRMSR32 MSR_DS_AREA, LAPIC_BASE
        BRANCHES
        CHECK_EQ dword [APIC_TPR], 0, "DS_AREA at the LAPIC page: dropped, the TPR untouched"
        ; ---- 2. BTS buffer at the LAPIC's TPR
        SET_DS APIC_TPR, APIC_TPR, APIC_TPR + 4 * 24, APIC_TPR + 4 * 24
        BRANCHES
        CHECK_EQ dword [APIC_TPR], 0, "BTS buffer at the LAPIC page: the TPR untouched"
        CHECK_EQ dword [dsa + 0x08], APIC_TPR, "BTS buffer at the LAPIC page: index kept"
        ; ---- 3. IA32_DS_AREA = the first byte beyond RAM
        WRMSR32 MSR_DS_AREA, RAM_END
        BRANCHES
        PASS "DS_AREA at the end of RAM: dropped, the guest runs on"
        ; ---- 4. IA32_DS_AREA straddling the end of RAM: fields 0-1 in RAM, 2-3 beyond it
        mov dword [RAM_END - 16], bts_buf               ; base
        mov dword [RAM_END - 12], 0
        mov dword [RAM_END - 8], bts_buf                ; index
        mov dword [RAM_END - 4], 0
        mov dword [bts_buf], PATTERN
        WRMSR32 MSR_DS_AREA, RAM_END - 16
        BRANCHES
        CHECK_EQ dword [RAM_END - 8], bts_buf, "DS_AREA straddling the end of RAM: index kept"
        CHECK_EQ dword [bts_buf], PATTERN, "DS_AREA straddling the end of RAM: nothing stored"
        ; ---- 5. a BTS record straddling the end of RAM (12 of its 24 bytes in RAM)
        mov dword [RAM_END - 12], PATTERN
        mov dword [RAM_END - 8], PATTERN
        mov dword [RAM_END - 4], PATTERN
        SET_DS RAM_END - 12, RAM_END - 12, RAM_END + 36, RAM_END + 36
        BRANCHES
        CHECK_EQ dword [dsa + 0x08], RAM_END - 12, "record straddling the end of RAM: index kept"
        CHECK_EQ dword [RAM_END - 12], PATTERN, "record straddling the end of RAM: no byte written (E-12)"
        CHECK_EQ dword [RAM_END - 4], PATTERN, "record straddling the end of RAM: no byte written (E-4)"
        ; ---- 6. a record ending exactly at the end of RAM: stored (one-record circular buffer)
        SET_DS RAM_END - 24, RAM_END - 24, RAM_END, RAM_END
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS
e1:     jmp e2
e2:     WRMSR32 MSR_DEBUGCTL, 0
        CHECK_EQ dword [RAM_END - 24], e1, "record ending at the end of RAM: from = e1"
        CHECK_EQ dword [RAM_END - 16], e2, "record ending at the end of RAM: to = e2"
        CHECK_EQ dword [dsa + 0x08], RAM_END - 24, "record ending at the end of RAM: index back to base"
        ; ---- 7. BTS buffer beyond the end of RAM
        SET_DS RAM_END, RAM_END, RAM_END + 4 * 24, RAM_END + 4 * 24
        BRANCHES
        CHECK_EQ dword [dsa + 0x08], RAM_END, "BTS buffer beyond RAM: index kept"
        ; ---- 8./9. PEBS buffer at the LAPIC page and straddling the end of RAM
        call dbg_pmu_probe32
        jnc .pebs
        SKIP "PEBS buffer at the LAPIC page (no PEBS)"
        SKIP "PEBS buffer straddling the end of RAM (no PEBS)"
        ret
.pebs:
        mov eax, APIC_TPR
        call pebs_try
        CHECK_EQ eax, 1, "PEBS buffer at the LAPIC page: assist skipped, PMC0 overflow bit stays"
        CHECK_EQ dword [APIC_TPR], 0, "PEBS buffer at the LAPIC page: the TPR untouched"
        mov dword [RAM_END - 0x40], PATTERN
        mov eax, RAM_END - 0x40
        call pebs_try
        CHECK_EQ eax, 1, "PEBS record straddling the end of RAM: assist skipped, overflow bit stays"
        CHECK_EQ dword [RAM_END - 0x40], PATTERN, "PEBS record straddling the end of RAM: no byte written"
        ret

; pebs_try: EAX = PEBS buffer base (index = base, maximum = base + 4 records, threshold far
; above). PMC0 counts instructions retired from 2^48 - 1 with PEBS on it; the enabling
; GLOBAL_CTRL WRMSR wraps it (armed, docs/pmu-model.md "The WRMSR itself"), the next
; instruction is the PEBS event. Returns EAX = GLOBAL_STATUS bit 0 as left by the attempt
; (1: the assist was skipped; a written record clears it) and checks the index kept.
pebs_try:
        mov [dsa + 0x20], eax
        mov dword [dsa + 0x24], 0
        mov [dsa + 0x28], eax
        mov dword [dsa + 0x2C], 0
        add eax, 4 * 0xC0
        mov [dsa + 0x30], eax
        mov dword [dsa + 0x34], 0
        mov dword [dsa + 0x38], 0xFFFFFFFF
        mov dword [dsa + 0x3C], 0
        mov dword [dsa + 0x40], 0xFFFFFFF0               ; PMC0 reset value (not used: no record)
        mov dword [dsa + 0x44], 0xFFFF
        mov dword [dsa + 0x00], 0                        ; BTS fields unused
        mov dword [dsa + 0x08], 0
        mov dword [dsa + 0x10], 0
        WRMSR32 MSR_DS_AREA, dsa
        WRMSR32 0x38F, 0
        WRMSR32 0xC1, 0xFFFFFFFF                        ; PMC0 = 2^48 - 1
        WRMSR32 0x186, 0xC0 | (1 << 8) | (1 << 16) | (1 << 17) | (1 << 22)
        WRMSR32 0x3F1, 1                                ; PEBS on PMC0
        WRMSR32 0x38F, 1                                ; counted: wraps PMC0, arms PEBS
        mov esi, 1                                      ; the PEBS event: its assist fails
        mov esi, 2
        WRMSR32 0x38F, 0
        WRMSR32 0x3F1, 0
        mov ecx, 0x38E
        rdmsr
        and eax, 1
        push eax
        mov ecx, 0x390                                  ; clear PMC0's overflow bit
        mov eax, 1
        xor edx, edx
        wrmsr
        pop eax
        mov edx, [dsa + 0x20]
        cmp edx, [dsa + 0x28]
        je .kept
        FAIL "PEBS index kept"
.kept:
        ret

section .data
align 64
dsa:            times 0x100 db 0
align 64
bts_buf:        times 4 * 24 db 0

%include "end.inc"
