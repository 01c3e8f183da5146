; rtc_irq_pm32: the MC146818's interrupts (vmm/cmos_rtc.h) on IRQ 8, through the slave 8259
; (vector 28H; the master's cascade input 2 unmasked), as a PC kernel of the 8259 era takes
; them. Ring 0, pm32. Each part arms one interrupt source in register B and halts until IRQ 8;
; the handler reads register C (which clears the flags and lowers IRQ 8) and acknowledges.
; 1. Periodic: PIE at the reset rate (register A 26H: 1024 Hz): three HLTs, each woken by IRQ 8,
;    C with IRQF and PF each time (and UF if a second ended meanwhile). The alarm's hour is set
;    to 25 first, which never comes, so that no AF joins the parts before 3.
; 2. Update-ended: the periodic rate off (A = 20H), UIE: one IRQ 8 within a second, C = 90H
;    (IRQF, UF).
; 3. Alarm: every field "don't care" (C0H), AIE: one IRQ 8 at the next second, C = B0H (IRQF,
;    AF, UF: an alarm comes with an update).
;    The handler masks IRQ 8 at the slave and each HLT unmasks it: one handler run per HLT, as
;    in pit_pm32, however slowly the host delivers; it counts a run only with IRQF in C (the
;    slave keeps an edge of the part before while IRQ 8 is masked), as Linux's handler checks.
; 4. The HPET's legacy replacement mode (vmm/hpet.h) cuts the RTC off IRQ 8: PIE at 1024 Hz with
;    legacy replacement on and the HPET's timers off: no IRQ 8 while its counter runs 5 ms
;    (500 000 ticks); with legacy replacement off, the next HLT is woken by IRQ 8.
; Expected: status 1 under vbts on either engine (rtc_irq_pm32_kvm); QEMU runs SeaBIOS, which
; programs the RTC and the 8259s itself: qemu = no.
%include "rt.inc"
%include "cmos.inc"
%include "hpet.inc"


; HLT with IF=1 until dword %1 reaches %2, IRQ 8 unmasked at the slave for each HLT (the
; handler masks it: one handler run per HLT however slowly the host delivers).
%macro WAIT_UNTIL 2
%%again:
        mov al, 0xFE
        out 0xA1, al
        sti
        hlt
        cli
        cmp dword %1, %2
        jb %%again
%endmacro

main:
        SET_HANDLER 0x28, irq8_handler
        APIC_ENABLE
        mov dword [LVT_LINT0], 0x700
        mov eax, 0x2820                         ; vector bases 20H, 28H; all masked
        call rt_pic_init32
        mov al, 0xFB                            ; master: the cascade (IRQ 2)
        out 0x21, al
        CMOS_WRITE 0x05, 0x25                   ; an alarm hour that never comes (25)
        call clear_c                            ; any flag from before

        ; ---- 1. periodic
        CMOS_WRITE 0x0B, 0x42                   ; PIE, 24-hour, BCD
        WAIT_UNTIL [irqs], 3
        CMOS_WRITE 0x0B, 0x02
        CHECK_EQ dword [irqs], 3, "periodic: three HLTs, each woken by IRQ 8 (vector 28H)"
        and dword [c_or], 0xC0                  ; (a second may end meanwhile: UF)
        CHECK_EQ dword [c_or], 0xC0, "periodic: register C with IRQF and PF in the handler"

        ; ---- 2. update-ended
        CMOS_WRITE 0x0A, 0x20                   ; no periodic rate
        call clear_c
        mov dword [irqs], 0
        mov dword [c_or], 0
        CMOS_WRITE 0x0B, 0x12                   ; UIE
        WAIT_UNTIL [irqs], 1
        CMOS_WRITE 0x0B, 0x02
        CHECK_EQ dword [c_last], 0x90, "update-ended: IRQ 8 with register C = 90H (IRQF, UF)"

        ; ---- 3. alarm, every second
        CMOS_WRITE 0x01, 0xC0
        CMOS_WRITE 0x03, 0xC0
        CMOS_WRITE 0x05, 0xC0
        call clear_c
        mov dword [irqs], 0
        CMOS_WRITE 0x0B, 0x22                   ; AIE
        WAIT_UNTIL [irqs], 1
        CMOS_WRITE 0x0B, 0x02
        CHECK_EQ dword [c_last], 0xB0, "alarm: IRQ 8 with register C = B0H (IRQF, AF, UF)"

        ; ---- 4. the HPET's legacy replacement mode cuts the RTC off
        CMOS_WRITE 0x0A, 0x26                   ; 1024 Hz again
        call clear_c
        mov dword [irqs], 0
        mov dword [GCONF], ENABLE | LEGACY
        CMOS_WRITE 0x0B, 0x42                   ; PIE
        mov ebx, [COUNTER]
        mov al, 0xFE                            ; slave: IRQ 8
        out 0xA1, al
        sti
.spin:  mov eax, [COUNTER]
        sub eax, ebx
        cmp eax, 500000
        jb .spin
        cli
        CHECK_EQ dword [irqs], 0, "HPET legacy replacement: no RTC IRQ 8 in 5 ms of periodic flags"
        mov dword [GCONF], ENABLE               ; legacy replacement off
        call clear_c                            ; (IRQ 8 rises at the next period)
        WAIT_UNTIL [irqs], 1
        CHECK_EQ dword [irqs], 1, "without legacy replacement the RTC's IRQ 8 comes again"
        CMOS_WRITE 0x0B, 0x02
        mov dword [GCONF], 0
        ret

clear_c:
        CMOS_READ 0x0C
        ret

irq8_handler:
        CMOS_READ 0x0C
        test al, 0x80                           ; IRQF: the RTC's (not an edge the masked
        jz .ack                                 ; slave kept from the part before)
        inc dword [irqs]
        movzx eax, al
        mov [c_last], eax
        or [c_or], eax
.ack:
        mov al, 0xFF                            ; slave: IRQ 8 masked until the next HLT
        out 0xA1, al
        PIC_EOI_SLAVE
        ret

section .data
align 4
irqs:           dd 0
c_last:         dd 0
c_or:           dd 0

%include "end.inc"
