; guest_dbp_pm32: the guest's own data breakpoint with nothing traced (SDM vol. 3B 17.2.4,
; 17.3.1.2), 32-bit ring 0. All DR7 writes go through one MOV DR7 (set_dr7), and the image has
; no CPUID: on a host that does not raise the guest's data breakpoints (this PVM host) vbts
; guards that one instruction, sees the guest enable a data breakpoint and steps the guest
; until it disables it again; elsewhere the CPU raises it (docs/tracing.md).
;  - DR1 = watch, DR7 = L1 | RW1=01 (write) | LEN1=11 (dword): a read of watch does not trap,
;    `mov dword [watch], 5` does: one #DB with EIP = after_write, DR6.B1.
;  - after DR7 = 0, another write does not trap.
;  - DR7 = L1 | RW1=11 (read or write) | LEN1=11: `nop dword [watch]` and `prefetcht0 [watch]`
;    do not trap (no memory operation), `mov eax, [watch]` does: EIP = after_read.
; Expected: status 1, output guest_dbp_pm32.expected (the same under QEMU TCG).
%include "rt.inc"
%include "db_data.inc"

main:
        SET_HANDLER 1, db_data_handler
        mov eax, watch
        mov dr1, eax
        mov eax, (1 << 2) | (01b << 20) | (11b << 22)
        call set_dr7
        mov eax, [watch]                ; a read: no trap
        mov dword [watch], 5
after_write:
        xor eax, eax
        call set_dr7
        mov dword [watch], 6            ; breakpoint off: no trap
        CHECK_EQ dword [db_count], 1, "one #DB, for the write while the breakpoint was on"
        CHECK_EQ dword [db_eip], after_write, "trap after the write: EIP = after_write"
        CHECK_DR6 2, "DR6.B1"
        CHECK_EQ dword [watch], 6, "both writes happened"
        ; RW1=11 (reads and writes): the multi-byte NOP and PREFETCHT0 name watch but access
        ; no memory (SDM vol. 2B NOP, PREFETCHh): no trap; the read after them traps.
        mov eax, (1 << 2) | (11b << 20) | (11b << 22)
        call set_dr7
        nop dword [watch]
        prefetcht0 [watch]
        mov eax, [watch]
after_read:
        xor eax, eax
        call set_dr7
        CHECK_EQ dword [db_count], 2, "RW=11: one more #DB, for the read (none for NOP and PREFETCHT0)"
        CHECK_EQ dword [db_eip], after_read, "trap after the read: EIP = after_read"
        ret

set_dr7:                                ; EAX -> DR7: the image's one MOV DR7
        mov dr7, eax
        ret

section .data
align 4
watch:          dd 0

%include "end.inc"
