; hostile_idt_oor: the IDT beyond the end of RAM (base 0xF0000000, 128 MiB of RAM: nothing there)
; when an exception is delivered. The gate for #UD is read from a guest-physical address that is
; not RAM, so it is not a usable gate to the runtime's handler; each delivery faults again, through
; the same table, so the CPU reaches #DF and then shuts down (SDM 6.15, table 6-5). vbts ends with
; 120 (triple fault) and one stderr line naming CS:EIP; it neither crashes nor reads host memory
; outside guest RAM. QEMU (-no-reboot) exits 0.
%include "rt.inc"

main:
        PRINTLN "IDT at 0xF0000000, then UD2"
        lidt [bad_idtr]
        ud2
        PRINTLN "FAIL: UD2 returned"
        ret

section .data
align 4
        dw 0
bad_idtr:
        dw 256 * 8 - 1
        dd 0xF0000000

%include "end.inc"
