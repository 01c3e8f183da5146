; hostile_ds_overlap: BTS records written over the things that steer the CPU, 32-bit protected mode,
; the 64-bit DS format (DTES64, `westmere`). A BTS record is a memory store like any other
; (docs/pmu-model.md, "BTS": the management area is read at every record, the index written after
; it), so each outcome follows from the record's bytes - from, to, flags = 0 - and where they land:
;  1. The buffer over the DS save area itself (base = IA32_DS_AREA): the first record overwrites
;     base, index and maximum with from, to and 0; then the index is written back (base + 24).
;     The next branch finds maximum 0 < base: dropped (a vbts warning), nothing more changes.
;  2. The buffer over the IDT (a one-record circular buffer), its flags field (0) over gate 6
;     (#UD): gate 6 is all zeros, an invalid gate type, so a UD2 raises #GP with error code
;     6*8 + 2 (IDT bit; SDM vol. 2 INT n pseudo-code, 6.13: the type is checked before P), not #UD.
;     BTS stays on across the UD2: the #UD attempt and the #GP delivery store their records over
;     gates 4-6 again (flags 0 on gate 6 each time).
;  3. The buffer over code that already ran: the record's `to` field lands on the first bytes of
;     `victim` (mov eax, 1; ret). The jump target `tgt_c3` is placed at an address whose low byte is
;     0xC3, so victim now starts with RET: calling it again returns at once and EAX keeps 0x55.
;     A store to code is seen by the next fetch of it (SDM vol. 3A 11.6, self-modifying code); an
;     engine that kept running its earlier translation would return EAX = 1.
; Expected: status 1 under vbts; QEMU TCG (no DS): SKIP (155).
%include "rt.inc"
%include "debug32.inc"

%macro SET_FIELD 2                      ; field, value (high dword 0)
        mov dword [dsa + (%1) * 8], %2
        mov dword [dsa + (%1) * 8 + 4], 0
%endmacro

main:
        BTS_REQUIRE
        cmp dword [dbg_fmt64], 1
        je .ok
        SKIP "the 64-bit DS format (DTES64) is needed"
        ret
.ok:
        WRMSR32 MSR_DS_AREA, dsa
        ; ---- 1. the buffer over the DS save area
        SET_FIELD 0, dsa
        SET_FIELD 1, dsa
        SET_FIELD 2, dsa + 4 * 24
        SET_FIELD 3, dsa + 4 * 24
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS
o1:     jmp o2
o2:     jmp o3                          ; maximum is 0 now: dropped
o3:     WRMSR32 MSR_DEBUGCTL, 0
        CHECK_EQ dword [dsa], o1, "buffer over the DS area: base = the record's from (o1)"
        CHECK_EQ dword [dsa + 8], dsa + 24, "buffer over the DS area: index = base + 24, written after the record"
        CHECK_EQ dword [dsa + 16], 0, "buffer over the DS area: maximum = the record's flags (0)"
        CHECK_EQ dword [dsa + 24], dsa + 4 * 24, "buffer over the DS area: threshold untouched"
        ; ---- 2. the buffer over the IDT: flags (record bytes 16..23) over gate 6
        SET_HANDLER 13, gp_handler
        SET_FIELD 0, rt_idt32 + 6 * 8 - 16
        SET_FIELD 1, rt_idt32 + 6 * 8 - 16
        SET_FIELD 2, rt_idt32 + 6 * 8 + 8
        SET_FIELD 3, rt_idt32 + 6 * 8 + 8
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS
i1:     jmp i2
i2:     mov eax, [rt_idt32 + 6 * 8 + 4]
        mov [gate6_hi], eax
ud_site:
        ud2
        WRMSR32 MSR_DEBUGCTL, 0
        CHECK_EQ dword [gate6_hi], 0, "buffer over the IDT: gate 6 = flags (0: invalid type)"
        CHECK_EQ dword [gp_count], 1, "UD2 through the zeroed gate: one #GP"
        CHECK_EQ dword [gp_error], 6 * 8 + 2, "#GP error code = 6*8 + 2 (IDT, vector 6)"
        CHECK_EQ dword [gp_eip], ud_site, "#GP frame EIP = the UD2"
        call rt_idt_init32              ; the runtime's gates back
        ; ---- 3. the buffer over code that already ran
        SET_FIELD 0, safe_buf
        SET_FIELD 1, safe_buf
        SET_FIELD 2, safe_buf + 8 * 24
        SET_FIELD 3, safe_buf + 8 * 24
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS
        mov eax, 0x55
        call victim                     ; runs (and is translated) as written: EAX = 1
        mov [first_eax], eax
        SET_FIELD 0, victim - 8         ; the next record: from at victim-8, to at victim
        SET_FIELD 1, victim - 8
        SET_FIELD 2, victim + 16
        SET_FIELD 3, victim + 16
        jmp tgt_c3
back_c3:
        mov eax, 0x55
        call victim
        mov [second_eax], eax
        WRMSR32 MSR_DEBUGCTL, 0
        CHECK_EQ dword [first_eax], 1, "victim as written: EAX = 1"
        mov eax, [victim]
        and eax, 0xFF
        CHECK_EQ eax, 0xC3, "record over victim: its first byte = the low byte of tgt_c3 (RET)"
        CHECK_EQ dword [second_eax], 0x55, "victim after the record: RET first, EAX kept (no stale code)"
        ret

gp_handler:
        inc dword [gp_count]
        mov eax, [ebx + F32_ERROR]
        mov [gp_error], eax
        mov eax, [ebx + F32_EIP]
        mov [gp_eip], eax
        add dword [ebx + F32_EIP], 2    ; skip the UD2
        ret

section .text
align 16
        times 8 db 0xCC                 ; the record's from field lands here
victim:
        mov eax, 1                      ; 5 bytes
        ret
        times 16 - ($ - victim) db 0x90 ; the flags field lands on victim + 8 .. + 15

align 256
        times 0xC3 db 0xCC
tgt_c3:                                 ; low byte of the address: 0xC3 (RET)
        SET_FIELD 0, safe_buf           ; no branch before this: the buffer off victim again
        SET_FIELD 1, safe_buf
        SET_FIELD 2, safe_buf + 8 * 24
        SET_FIELD 3, safe_buf + 8 * 24
        jmp back_c3

section .data
align 4
gp_count:       dd 0
gp_error:       dd 0
gp_eip:         dd 0
gate6_hi:       dd 0
first_eax:      dd 0
second_eax:     dd 0
align 64
dsa:            times 0x60 db 0
align 64
safe_buf:       times 8 * 24 db 0

%include "end.inc"
