; bts_bad: a guest that programs nonsense into IA32_DS_AREA and the DS save area (docs/pmu-model.md,
; "Bad guest programming"). Each case has a defined outcome and the guest keeps running:
;  1. DS_AREA non-canonical (0x00008000_00000000): WRMSR raises #GP(0) (SDM 17.4.9).
;  2. DS_AREA beyond guest RAM (0xF0000000, nothing there): BTS on, 4 jumps: no record, no crash.
;  3. index outside [base, max]: the buffer stays untouched and the index keeps its value.
;  4. maximum < base + one record: nothing stored, the index keeps its value.
;  5. DEBUGCTL with a reserved bit (bit 2): #GP(0) (SDM 17.4.1).
; vbts prints one warning per distinct problem on stderr and counts the dropped records (-v).
; Expected: status 1 under vbts; QEMU TCG: SKIP (155).
%include "rt.inc"
%include "debug32.inc"

main:
        BTS_REQUIRE
        SET_HANDLER 13, gp_handler
        ; ---- 1
        mov ecx, MSR_DS_AREA
        xor eax, eax
        mov edx, 0x00008000
        mov dword [gp_count], 0
        wrmsr                           ; #GP: the handler skips the 2-byte WRMSR
        CHECK_EQ dword [gp_count], 1, "non-canonical IA32_DS_AREA: #GP"
        ; ---- 2
        WRMSR32 MSR_DS_AREA, 0xF0000000
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS
        jmp .j1
.j1:    jmp .j2
.j2:    jmp .j3
.j3:    WRMSR32 MSR_DEBUGCTL, 0
        PASS "DS area outside RAM: the guest keeps running"
        ; ---- 3: index far above max
        mov eax, bts_buffer
        mov ecx, 4
        mov edx, 4
        call dbg_ds_init32
        mov eax, [dbg_fw]
        mov dword [dbg_ds_area + eax], bts_buffer + 0x10000
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS
        jmp .k1
.k1:    WRMSR32 MSR_DEBUGCTL, 0
        mov eax, 1
        call dbg_ds_field32
        CHECK_EQ eax, bts_buffer + 0x10000, "index outside [base, max]: kept, nothing stored"
        CHECK_EQ dword [bts_buffer], 0, "index outside [base, max]: buffer untouched"
        ; ---- 4: max = base + 4 bytes
        mov eax, bts_buffer
        mov ecx, 4
        mov edx, 4
        call dbg_ds_init32
        mov eax, [dbg_fw]
        mov dword [dbg_ds_area + eax * 2], bts_buffer + 4
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS
        jmp .m1
.m1:    WRMSR32 MSR_DEBUGCTL, 0
        mov eax, 1
        call dbg_ds_field32
        CHECK_EQ eax, bts_buffer, "maximum below one record: index kept"
        CHECK_EQ dword [bts_buffer], 0, "maximum below one record: buffer untouched"
        ; ---- 5
        mov dword [gp_count], 0
        mov ecx, MSR_DEBUGCTL
        mov eax, 1 << 2
        xor edx, edx
        wrmsr
        CHECK_EQ dword [gp_count], 1, "DEBUGCTL reserved bit: #GP"
        ret

        GP_SKIP_HANDLER                 ; gp_handler: counts and steps over the 2-byte WRMSR

section .bss
alignb 64
bts_buffer:     resb 24 * 4

%include "end.inc"
