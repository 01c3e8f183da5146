; ioapic_pm32: the I/O APIC at 0xFEC00000 driven by pc-testdev's IRQ lines (a write of v to port
; 0x2000 + n sets ISA line n to v), as kvm-unit-tests' ioapic.c does, on the TCG engine's model
; (vcpu/ioapic.h) or KVM's in-kernel one. Ring 0, pm32, IF=1, physical destination 0 (this CPU).
; Each line change and the unmasking are a CALL, whose RET ends the translated block, so the
; interrupt is taken at the instruction after the call, as kvm-unit-tests expects (its
; set_irq_line and set_mask are functions too).
; 1. Registers: version 00170011H (24 entries, version 11H) read only; ID bits 27:24 writable;
;    the arbitration ID follows the ID.
; 2. Edge entry (pin 14, vector 76H): one interrupt per rising edge; a line held high gives no
;    second one; TMR bit of 76H clear in the handler.
; 3. Level entry (pin 14, vector 77H): the handler sees Remote IRR set and TMR set; its first
;    run leaves the line high, so its EOI (broadcast to the I/O APIC) delivers the interrupt
;    again; the second run lowers the line first: 2 runs, Remote IRR clear afterwards.
; 4. Masked level entry (pin 15, vector 78H): line high, no interrupt; unmasking delivers it.
; Expected: status 1 under vbts; QEMU runs without pc-testdev here (qemu = no). This PVM host's
; in-kernel IOAPIC (--engine=kvm) fails 3: a third delivery and Remote IRR read 0 in part 3, and
; no delivery on unmasking in part 4 (as kvm-unit-tests ioapic.flat under QEMU-KVM here).
%include "rt.inc"

%define IOAPIC          0xFEC00000
%define IOREGSEL        (IOAPIC + 0x00)
%define IOWIN           (IOAPIC + 0x10)
%define LEVEL           (1 << 15)
%define MASKED          (1 << 16)
%define REMOTE_IRR      (1 << 14)

%macro IOAPIC_WRITE 2                   ; register, value
        mov dword [IOREGSEL], %1
        mov dword [IOWIN], %2
%endmacro
%macro IOAPIC_READ 1                    ; register -> EAX
        mov dword [IOREGSEL], %1
        mov eax, [IOWIN]
%endmacro
%macro LINE 2                           ; pin, level
        push eax
        push edx
        mov eax, %1
        mov edx, %2
        call rt_irq_line32
        pop edx
        pop eax
%endmacro

main:
        SET_HANDLER 0x76, edge_handler
        SET_HANDLER 0x77, level_handler
        SET_HANDLER 0x78, masked_handler
        APIC_ENABLE
        sti
        ; ---- 1. registers
        IOAPIC_READ 1
        CHECK_EQ eax, 0x00170011, "version register: 24 entries, version 11H"
        IOAPIC_WRITE 1, 0xFFFFFFFF
        IOAPIC_READ 1
        CHECK_EQ eax, 0x00170011, "version register read only"
        IOAPIC_WRITE 0, 0xFFFFFFFF
        IOAPIC_READ 0
        CHECK_EQ eax, 0x0F000000, "ID: only bits 27:24 writable"
        IOAPIC_READ 2
        CHECK_EQ eax, 0x0F000000, "arbitration ID = ID"
        IOAPIC_WRITE 0, 0

        ; ---- 2. edge
        IOAPIC_WRITE 0x11 + 2 * 14, 0                          ; destination 0
        IOAPIC_WRITE 0x10 + 2 * 14, 0x76                       ; fixed, physical, edge, unmasked
        LINE 14, 1
        nop
        CHECK_EQ dword [edge_count], 1, "edge: one interrupt on the rising edge"
        LINE 14, 1
        nop
        CHECK_EQ dword [edge_count], 1, "edge: none while the line stays high"
        LINE 14, 0
        LINE 14, 1
        nop
        CHECK_EQ dword [edge_count], 2, "edge: a second rising edge, a second interrupt"
        CHECK_EQ dword [edge_tmr], 0, "edge: TMR bit clear in the handler"
        LINE 14, 0

        ; ---- 3. level
        IOAPIC_WRITE 0x10 + 2 * 14, 0x77 | LEVEL
        LINE 14, 1
        nop
        CHECK_EQ dword [level_count], 2, "level: EOI with the line high delivers again (2 runs)"
        CHECK_EQ dword [level_irr], REMOTE_IRR, "level: Remote IRR set in the handler"
        CHECK_EQ dword [level_tmr], 1, "level: TMR bit set in the handler"
        IOAPIC_READ 0x10 + 2 * 14
        and eax, REMOTE_IRR
        CHECK_EQ eax, 0, "level: Remote IRR clear after the last EOI"

        ; ---- 4. masked level
        IOAPIC_WRITE 0x10 + 2 * 15, 0x78 | LEVEL | MASKED
        LINE 15, 1
        nop
        CHECK_EQ dword [masked_count], 0, "masked level: no interrupt"
        call unmask_15
        nop
        CHECK_EQ dword [masked_count], 1, "masked level: unmasking with the line high delivers"
        cli
        ret

unmask_15:
        IOAPIC_WRITE 0x10 + 2 * 15, 0x78 | LEVEL
        ret

; TMR bit of vector V: register 180H + 10H * (V / 32), bit V % 32 -> EAX = 0/1
%macro TMR_BIT 1
        mov eax, LAPIC_TMR + 0x10 * (%1 / 32)
        call rt_lapic_read32
        shr eax, %1 % 32
        and eax, 1
%endmacro

edge_handler:
        inc dword [edge_count]
        TMR_BIT 0x76
        mov [edge_tmr], eax
        APIC_EOI
        ret

level_handler:
        inc dword [level_count]
        IOAPIC_READ 0x10 + 2 * 14
        and eax, REMOTE_IRR
        mov [level_irr], eax
        TMR_BIT 0x77
        mov [level_tmr], eax
        cmp dword [level_count], 2
        jb .eoi
        LINE 14, 0
.eoi:   APIC_EOI
        ret

masked_handler:
        inc dword [masked_count]
        LINE 15, 0
        APIC_EOI
        ret

section .data
align 4
edge_count:     dd 0
edge_tmr:       dd 0xFFFFFFFF
level_count:    dd 0
level_irr:      dd 0
level_tmr:      dd 0
masked_count:   dd 0

%include "end.inc"
