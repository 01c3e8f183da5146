; pic_pm32: the 8259 pair through the local APIC's LINT0 in ExtINT mode (virtual wire), driven
; by pc-testdev's IRQ lines (a write of v to port 0x2000 + n sets ISA line n to v), on the TCG
; engine's model (vcpu/pic8259.h). Ring 0, pm32, IF=1. rt.inc masks both 8259s at start; the
; image initialises them as a BIOS does (ICW1 11H, vector bases 20H and 28H, cascade on IRQ 2,
; ICW4 8086 mode), unmasks IRQ 2 and IRQ 11 only, and sets LVT LINT0 = 700H (ExtINT, unmasked).
; The I/O APIC's pin 11 stays masked (reset), so only the 8259s deliver IRQ 11.
; Each line change is a CALL whose RET ends the translated block, so the interrupt is taken at
; the instruction after the call.
; 1. A rising edge on IRQ 11: vector 28H + 3 = 2BH, once; in the handler the slave's ISR (OCW3
;    0BH) = 08H and the master's = 04H (cascade input 2); EOIs to both end it.
; 2. IRQ 11 masked in the slave's IMR: an edge stays in its IRR (OCW3 0AH: 08H) with no
;    interrupt; unmasking delivers it.
; 3. LINT0 masked (10700H): an edge reaches no CPU; unmasking LINT0 delivers it.
; Expected: status 1 under vbts; QEMU runs without pc-testdev here (qemu = no).
%include "rt.inc"


%macro LINE 2                           ; pin, level
        mov eax, %1
        mov edx, %2
        call rt_irq_line32
%endmacro
%macro PULSE 1
        LINE %1, 1
        LINE %1, 0
%endmacro

main:
        SET_HANDLER 0x2B, irq11_handler
        APIC_ENABLE
        mov dword [LVT_LINT0], 0x700
        mov eax, 0x2820                         ; BIOS-style initialisation: bases 20H, 28H
        call rt_pic_init32
        mov al, 0xFB                            ; master: only IRQ 2 (the slave)
        out 0x21, al
        mov al, 0xF7                            ; slave: only IRQ 11
        out 0xA1, al
        sti

        ; ---- 1. an edge on IRQ 11
        PULSE 11
        nop
        CHECK_EQ dword [count], 1, "IRQ 11 edge: vector 2BH once"
        CHECK_EQ dword [slave_isr], 0x08, "slave ISR = 08H in the handler"
        CHECK_EQ dword [master_isr], 0x04, "master ISR = 04H (cascade) in the handler"
        call read_isrs
        CHECK_EQ eax, 0, "both ISRs clear after the EOIs"

        ; ---- 2. masked in the IMR: the request waits in the IRR
        mov al, 0xFF
        out 0xA1, al
        PULSE 11
        nop
        CHECK_EQ dword [count], 1, "IRQ 11 masked in the IMR: no interrupt"
        mov al, 0x0A                            ; OCW3: read IRR
        out 0xA0, al
        in al, 0xA0
        movzx eax, al
        CHECK_EQ eax, 0x08, "slave IRR = 08H while masked"
        call unmask_slave
        nop
        CHECK_EQ dword [count], 2, "unmasking IRQ 11 delivers the waiting request"

        ; ---- 3. LINT0 masked
        mov dword [LVT_LINT0], 0x10700
        PULSE 11
        nop
        CHECK_EQ dword [count], 2, "LINT0 masked: no interrupt"
        call unmask_lint0
        nop
        CHECK_EQ dword [count], 3, "unmasking LINT0 delivers it"
        cli
        ret

unmask_slave:
        mov al, 0xF7
        out 0xA1, al
        ret

unmask_lint0:
        mov dword [LVT_LINT0], 0x700
        ret

; EAX = slave ISR << 8 | master ISR (OCW3 0BH: read ISR)
read_isrs:
        mov al, 0x0B
        out 0xA0, al
        out 0x20, al
        in al, 0xA0
        mov ah, al
        in al, 0x20
        movzx eax, ax
        ret

irq11_handler:
        inc dword [count]
        call read_isrs
        movzx edx, al
        mov [master_isr], edx
        movzx edx, ah
        mov [slave_isr], edx
        mov al, 0x20                            ; non-specific EOI: slave, then master
        out 0xA0, al
        out 0x20, al
        ret

section .data
align 4
count:          dd 0
slave_isr:      dd 0xFFFFFFFF
master_isr:     dd 0xFFFFFFFF

%include "end.inc"
