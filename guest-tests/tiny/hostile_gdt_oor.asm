; hostile_gdt_oor: the GDT beyond the end of RAM (base 0xF0000000, 128 MiB of RAM) when an
; exception is delivered. The loaded segment registers keep their cached descriptors, so the guest
; runs on until the delivery of #UD loads CS from the gate's selector 0x08: that descriptor is
; read from a guest-physical address that is not RAM, not a usable code segment, so the delivery
; faults, and so does every later one (the same gates, the same GDT): #DF, then shutdown (SDM
; 6.15). vbts ends with 120 (triple fault) and one stderr line. QEMU (-no-reboot) exits 0.
%include "rt.inc"

main:
        PRINTLN "GDT at 0xF0000000, then UD2"
        lgdt [bad_gdtr]
        ud2
        PRINTLN "FAIL: UD2 returned"
        ret

section .data
align 4
        dw 0
bad_gdtr:
        dw RT_GDT_ENTRIES * 8 - 1
        dd 0xF0000000

%include "end.inc"
