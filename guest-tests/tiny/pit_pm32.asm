; pit_pm32: the 8254 on the TCG engine (vcpu/pit8254.h), through the 8259 pair and LINT0
; (ExtINT), as a PC kernel of the 8259 era uses it. Ring 0, pm32. rt.inc masks both 8259s; the
; image initialises them (vector bases 20H and 28H), unmasks IRQ 0 only and sets LINT0 = 700H.
; 1. Channel 0 in mode 2 (rate generator), count 1193 (~1 kHz): three HLTs, each woken by one
;    IRQ 0 (vector 20H; nothing else can interrupt; the handler masks IRQ 0 and each round
;    unmasks it): the handler ran exactly 3 times.
; 2. Channel 0's count read through a counter latch lies in 1..1193 (it counts down and
;    reloads); a read-back of its status shows mode 2, LSB/MSB access: 34H, with OUT in bit 7.
; 3. Channel 2 as Linux calibrates the TSC with it: gate low (port 61H bit 0), mode 0, count
;    1000, gate high, poll port 61H bit 5 (OUT) until it rises: first read 0, then 1 after
;    1000 input clocks; with the gate low again a mode-0 count does not restart.
; Expected: status 1 under vbts; QEMU runs SeaBIOS, whose 8259 and PIT set-up differs (qemu = no).
%include "rt.inc"

%define LVT_LINT0       (LAPIC_BASE + 0x350)

main:
        SET_HANDLER 0x20, irq0_handler
        APIC_ENABLE
        mov dword [LVT_LINT0], 0x700
        mov eax, 0x2820                         ; vector bases 20H, 28H; all masked
        call rt_pic_init32
        mov al, 0xFE                            ; master: IRQ 0 only
        out 0x21, al

        ; ---- 1. channel 0, mode 2, ~1 kHz
        mov al, 0x34                            ; channel 0, LSB/MSB, mode 2, binary
        out 0x43, al
        mov ax, 1193
        out 0x40, al
        mov al, ah
        out 0x40, al
        ; The handler masks IRQ 0 at the master 8259 and each round unmasks it before its
        ; STI; HLT: one handler run per HLT even when the host stalls the guest for more
        ; than a period (the 8259's IRR keeps one edge while the line is masked).
        mov ecx, 3
.tick:  mov al, 0xFE                            ; master: IRQ 0 unmasked
        out 0x21, al
        sti
        hlt
        cli
        loop .tick
        CHECK_EQ dword [ticks], 3, "three HLTs, each woken by one IRQ 0 (vector 20H)"

        ; ---- 2. latch and read-back on channel 0
        mov al, 0x00                            ; counter latch, channel 0
        out 0x43, al
        in al, 0x40
        mov ah, al
        in al, 0x40
        xchg al, ah
        movzx eax, ax
        dec eax
        cmp eax, 1193
        CHECK_CC b, "channel 0's latched count in 1..1193"
        mov al, 0xE2                            ; read-back: status of channel 0
        out 0x43, al
        in al, 0x40
        and eax, 0x7F
        CHECK_EQ eax, 0x34, "channel 0 status: LSB/MSB, mode 2, binary"

        ; ---- 3. channel 2 through port 61H. The guest's clock is the host's: a host that
        ; stalls the guest for more than the 1000 clocks (838 us) between raising the gate
        ; and reading OUT makes OUT high already, so up to three tries.
        mov ebx, 3
.try:   in al, 0x61
        and al, 0xFC                            ; gate low, speaker off
        out 0x61, al
        mov al, 0xB0                            ; channel 2, LSB/MSB, mode 0
        out 0x43, al
        mov ax, 1000
        out 0x42, al
        mov al, ah
        out 0x42, al
        in al, 0x61
        or al, 1                                ; gate high
        out 0x61, al
        in al, 0x61
        and eax, 0x20
        jz .low
        dec ebx
        jnz .try
.low:   CHECK_EQ eax, 0, "channel 2 OUT low right after its count"
        mov ecx, 100000000
.poll:  in al, 0x61
        test al, 0x20
        jnz .risen
        dec ecx
        jnz .poll
.risen: test ecx, ecx
        CHECK_CC nz, "channel 2 OUT rises at the terminal count (port 61H bit 5)"
        ret

irq0_handler:
        inc dword [ticks]
        mov al, 0xFF                            ; master: all masked (the round unmasks IRQ 0)
        out 0x21, al
        mov al, 0x20
        out 0x20, al
        ret

section .data
align 4
ticks:          dd 0

%include "end.inc"
