; hpet_pm32: the HPET at 0xFED00000 (vmm/hpet.h), which vbts's ACPI HPET table announces, as
; a PC kernel drives it: legacy replacement through the 8259s, routes to the I/O APIC. Ring 0,
; pm32, paging off. rt.inc masks both 8259s; the image sets their vector bases to 20H and 28H
; and LINT0 to ExtINT (700H), as pit_pm32 does.
; 1. Capabilities: 8086A201H (vendor 8086H, LEG_RT_CAP, COUNT_SIZE_CAP, NUM_TIM_CAP 2, revision
;    1) and a period of 989680H fs (10 ns); timer 0 periodic and 64-bit capable (30H), routes
;    16-23 (00FF0000H).
; 2. The counter: 0 after reset, written while halted (1000H), running once enabled (a later
;    read is larger), a write while it runs dropped, holding still once halted again.
; 3. Legacy replacement, timer 0 periodic (Linux's hpet_set_periodic: PERIODIC, VAL_SET and
;    32-bit mode, the first expiry, then the period of 10000 ticks = 100 us): three HLTs, each
;    woken by one IRQ 0 (vector 20H; the handler masks IRQ 0, each round unmasks it). The
;    comparator then holds the next match: above the counter read before it, and the first
;    expiry plus a multiple of the period.
; 4. Legacy replacement cuts the 8254 off: channel 0 in mode 2 at ~1 kHz and IRQ 0 unmasked,
;    timer 0's interrupt disabled, timer 1 one-shot 5 ms on (IRQ 8, vector 28H): no IRQ 0 until
;    IRQ 8 came (the 8259s initialised again first: timer 0's edges after part 3 wait in the
;    master's IRR). With legacy replacement off, the 8254's IRQ 0 wakes the next HLT.
; 5. Timer 1 level-triggered on I/O APIC input 16 (vector 30H, level): the handler sees its
;    GINTR_STA bit (2), clears it (then 0) before its EOI: one interrupt in all. With
;    "edge-only" on the command line a SKIP line instead: under --engine=kvm the I/O APIC is
;    the host KVM's, whose level handling is not vbts's to test (this PVM host's delivers such
;    an interrupt again after its line went low before the EOI, as ioapic_pm32 shows there).
; 6. Timer 2 level-triggered with its interrupt disabled: GINTR_STA bit 2 comes on at the
;    match (the spec: the timer still sets its status), and no interrupt (vector 31H).
; 7. Timer 2 one-shot in 32-bit mode on input 17 (edge), the counter 1000H ticks before the
;    wrap of its low half, the comparator 2000000H: the first interrupt comes at the wrap (the
;    counter's high half 1, its low half below the comparator), the second at the match.
; Expected: status 1 under vbts on either engine; QEMU runs SeaBIOS, and its HPET routes
; differ (capability 00FF0104H on its current PC machine): qemu = no.
%include "rt.inc"
%include "hpet.inc"

%define PERIOD          10000                   ; ticks: 100 us
%define IOAPIC          0xFEC00000
%define IOREGSEL        (IOAPIC + 0x00)
%define IOWIN           (IOAPIC + 0x10)
%define IO_LEVEL        (1 << 15)

%macro IOAPIC_WRITE 2                   ; register, value
        mov dword [IOREGSEL], %1
        mov dword [IOWIN], %2
%endmacro
; HLT with IF=1 until dword %1 is nonzero (a wake-up that was not ours halts again).
%macro WAIT_FOR 1
%%again:
        sti
        hlt
        cli
        cmp dword %1, 0
        je %%again
%endmacro

main:
        SET_HANDLER 0x20, irq0_handler
        SET_HANDLER 0x28, irq8_handler
        SET_HANDLER 0x30, level_handler
        SET_HANDLER 0x31, timer2_handler
        APIC_ENABLE
        mov dword [LVT_LINT0], 0x700
        mov eax, 0x2820                         ; vector bases 20H, 28H; all masked
        call rt_pic_init32

        ; ---- 1. capabilities
        CHECK_EQ dword [GCAP], 0x8086A201, "GCAP_ID: vendor 8086H, legacy routes, 64-bit counter, 3 timers, revision 1"
        CHECK_EQ dword [GCAP + 4], 0x00989680, "GCAP_ID: a period of 10 ns (100 MHz)"
        CHECK_EQ dword [TCONF(0)], 0x30, "timer 0: periodic and 64-bit capable"
        CHECK_EQ dword [TCONF(0) + 4], 0x00FF0000, "timer 0: I/O APIC routes 16-23"

        ; ---- 2. the counter
        CHECK_EQ dword [COUNTER], 0, "counter 0 after reset, halted"
        mov dword [COUNTER], 0x1000
        CHECK_EQ dword [COUNTER], 0x1000, "counter written while halted"
        mov dword [GCONF], ENABLE
        mov ebx, [COUNTER]
        mov ecx, 100000
.spin:  dec ecx
        jnz .spin
        mov eax, [COUNTER]
        cmp eax, ebx
        CHECK_CC a, "counter runs once enabled"
        mov dword [COUNTER], 0
        cmp dword [COUNTER], 0x1000
        CHECK_CC a, "counter write while running dropped"
        mov dword [GCONF], 0
        mov ebx, [COUNTER]
        mov ecx, 100000
.spin2: dec ecx
        jnz .spin2
        CHECK_EQ dword [COUNTER], ebx, "counter holds once halted"

        ; ---- 3. legacy replacement, timer 0 periodic
        mov dword [TCONF(0)], T_INT | T_PERIODIC | T_VALSET | T_32
        mov eax, [COUNTER]
        add eax, PERIOD
        mov [first], eax
        mov [TCMP(0)], eax                      ; the first expiry (VAL_SET)
        mov dword [TCMP(0)], PERIOD             ; then the period
        mov dword [GCONF], ENABLE | LEGACY
        mov ecx, 3
.tick:  mov al, 0xFE                            ; master: IRQ 0 unmasked
        out 0x21, al
        sti
        hlt
        cli
        loop .tick
        CHECK_EQ dword [ticks], 3, "legacy timer 0: three HLTs, each woken by one IRQ 0 (vector 20H)"
        mov ebx, [COUNTER]
        mov eax, [TCMP(0)]
        cmp eax, ebx
        CHECK_CC a, "periodic comparator: the next match, above the counter"
        sub eax, [first]
        xor edx, edx
        mov ecx, PERIOD
        div ecx
        CHECK_EQ edx, 0, "periodic comparator: the first expiry plus a multiple of the period"

        ; ---- 4. legacy replacement cuts the 8254 off. Timer 0 went on after the third HLT,
        ; its edges latched in the master's IRR while IRQ 0 was masked: initialising the
        ; 8259s again drops them (ICW1 clears edge-triggered requests).
        mov dword [TCONF(0)], 0
        mov eax, 0x2820
        call rt_pic_init32
        mov dword [ticks], 0
        mov al, 0x34                            ; channel 0, LSB/MSB, mode 2: ~1 kHz
        out 0x43, al
        mov ax, 1193
        out 0x40, al
        mov al, ah
        out 0x40, al
        mov dword [TCONF(1)], T_INT
        mov eax, [COUNTER]
        add eax, 500000                         ; 5 ms
        mov [TCMP(1)], eax
        mov dword [TCMP(1) + 4], 0
        mov al, 0xFA                            ; master: IRQ 0 and the cascade (2)
        out 0x21, al
        mov al, 0xFE                            ; slave: IRQ 8
        out 0xA1, al
        WAIT_FOR [irq8s]
        CHECK_EQ dword [ticks], 0, "legacy replacement: no 8254 IRQ 0 in the 5 ms before timer 1's IRQ 8"
        mov al, 0xFA
        out 0x21, al
        mov dword [GCONF], ENABLE               ; legacy replacement off
        WAIT_FOR [ticks]
        CHECK_EQ dword [ticks], 1, "without legacy replacement the 8254's IRQ 0 comes again"
        mov al, 0x30                            ; channel 0 mode 0, no count: quiet
        out 0x43, al
        mov al, 0xFF
        out 0x21, al
        out 0xA1, al

        ; ---- 5. timer 1 level-triggered on I/O APIC input 16
        call edge_only
        jz .level
        SKIP "level timer 1 (edge-only: the I/O APIC is the host KVM's)"
        jmp .part6
.level:
        IOAPIC_WRITE 0x11 + 2 * 16, 0
        IOAPIC_WRITE 0x10 + 2 * 16, 0x30 | IO_LEVEL
        mov dword [TCONF(1)], T_LEVEL | T_INT | ROUTE(16)
        mov eax, [COUNTER]
        add eax, 100000                         ; 1 ms (KVM's MMIO exits here take ~10 us)
        mov [TCMP(1)], eax
        WAIT_FOR [levels]
        sti
        mov ecx, 100000                         ; time for a second delivery, if any
.spin3: dec ecx
        jnz .spin3
        cli
        CHECK_EQ dword [levels], 1, "level timer 1: one interrupt (status cleared before the EOI)"
        CHECK_EQ dword [level_sts], 2, "level timer 1: its GINTR_STA bit set in the handler"
        CHECK_EQ dword [level_sts_after], 0, "level timer 1: GINTR_STA clear after writing 1"
.part6: mov dword [TCONF(1)], 0

        ; ---- 6. status without an interrupt
        IOAPIC_WRITE 0x11 + 2 * 17, 0
        IOAPIC_WRITE 0x10 + 2 * 17, 0x31
        mov dword [TCONF(2)], T_LEVEL | ROUTE(17)
        mov eax, [COUNTER]
        add eax, 100000
        mov [TCMP(2)], eax
        mov dword [TCMP(2) + 4], 0
        sti
        mov ecx, 100000000
.poll:  test dword [GSTS], 4
        jnz .set
        dec ecx
        jnz .poll
.set:   cli
        mov eax, [GSTS]
        CHECK_EQ eax, 4, "timer 2 with its interrupt disabled: GINTR_STA bit 2 set at the match"
        CHECK_EQ dword [timer2s], 0, "timer 2 with its interrupt disabled: no interrupt"
        mov dword [GSTS], 4

        ; ---- 7. 32-bit one-shot: the wrap, then the match
        mov dword [GCONF], 0
        mov dword [COUNTER], 0xFFFFF000
        mov dword [COUNTER + 4], 0
        mov dword [TCONF(2)], T_INT | T_32 | ROUTE(17)
        mov dword [TCMP(2)], 0x02000000
        mov dword [GCONF], ENABLE
        WAIT_FOR [timer2s]
        CHECK_EQ dword [at_high], 1, "32-bit one-shot: the first interrupt at the wrap (counter high half 1)"
        mov eax, [at_low]
        cmp eax, 0x02000000
        CHECK_CC b, "32-bit one-shot: the wrap before the match"
        cmp dword [at_low], 0x02000000          ; (both at once: no second interrupt for 43 s)
        jae .done7
        mov dword [timer2s], 0
        WAIT_FOR [timer2s]
        mov eax, [at_low]
        cmp eax, 0x02000000
.done7: CHECK_CC ae, "32-bit one-shot: the second interrupt at the match"
        mov dword [GCONF], 0
        ret

; ZF=0 if the command line holds "edge-only" (Multiboot flags bit 2, cmdline at +16).
edge_only:
        mov ebx, [rt_mb_info]
        test dword [ebx], 4
        jz .no
        mov esi, [ebx + 16]
.scan:  cmp byte [esi], 0
        je .no
        mov edi, edge_only_arg
        mov ecx, edge_only_len
        push esi
        repe cmpsb
        pop esi
        je .yes
        inc esi
        jmp .scan
.yes:   or eax, 1                               ; ZF=0 (EAX was nonzero or is now)
        ret
.no:    xor eax, eax                            ; ZF=1
        ret

irq0_handler:
        inc dword [ticks]
        in al, 0x21                             ; master: IRQ 0 masked (each round unmasks it)
        or al, 1
        out 0x21, al
        mov al, 0x20
        out 0x20, al
        ret

irq8_handler:
        inc dword [irq8s]
        PIC_EOI_SLAVE
        ret

level_handler:
        inc dword [levels]
        mov eax, [GSTS]
        mov [level_sts], eax
        mov dword [GSTS], 2
        mov eax, [GSTS]
        mov [level_sts_after], eax
        APIC_EOI
        ret

timer2_handler:
        inc dword [timer2s]
        mov eax, [COUNTER]
        mov [at_low], eax
        mov eax, [COUNTER + 4]
        mov [at_high], eax
        APIC_EOI
        ret

section .data
edge_only_arg:  db "edge-only"
edge_only_len   equ $ - edge_only_arg
align 4
ticks:          dd 0
irq8s:          dd 0
levels:         dd 0
level_sts:      dd 0
level_sts_after: dd 0
timer2s:        dd 0
at_low:         dd 0
at_high:        dd 0
first:          dd 0

%include "end.inc"
