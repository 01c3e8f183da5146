; hostile_hpet_storm: a guest that programs the HPET (vmm/hpet.h) for an interrupt storm: timer 0
; periodic with a period of one tick (10 ns) in legacy replacement mode, IRQ 0 unmasked at the
; 8259, so that an interrupt is due at every instruction boundary; its handler counts and
; acknowledges, and the guest spins with IF=1 for ever. On a real CPU the handler would run
; back to back (an IRET opens the interrupt window at once). Defined outcome on either engine:
; vbts stays responsive and --timeout ends the run (status 124); its memory does not grow, as
; nothing is queued per interrupt (matches between two looks at the timer coalesce into one
; edge, as the 8259 keeps one request per line). On KVM vbts kicks KVM_RUN for each expiry, at
; most one kick every 100 us (vmm/machine.cc, as KVM keeps its own periodic LAPIC timer to
; 200 us); without that floor the SIGALRMs ended KVM_RUN before the guest took a single
; interrupt (0 in 2 s; ~13 500 with it on this PVM host).
%include "rt.inc"
%include "hpet.inc"


main:
        SET_HANDLER 0x20, irq0_handler
        APIC_ENABLE
        mov dword [LVT_LINT0], 0x700
        mov eax, 0x2820
        call rt_pic_init32
        mov dword [TCONF(0)], T_INT | T_PERIODIC | T_VALSET | T_32
        mov dword [TCMP(0)], 1                                ; the first match
        mov dword [TCMP(0)], 1                                ; the period: one tick
        PRINTLN "storm: armed"
        mov dword [GCONF], ENABLE | LEGACY
        mov al, 0xFE
        out 0x21, al
        sti
.spin:  jmp .spin

irq0_handler:
        inc dword [ticks]
        mov al, 0x20
        out 0x20, al
        ret

section .data
align 4
ticks:          dd 0

%include "end.inc"
