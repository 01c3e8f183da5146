; icount_clock: `vbts run --clock=instructions` (vmm/machine.h, docs/tcg-engine.md "Guest time"):
; the guest's time runs on retired instructions for the whole run, with no counter, BTS or LBR
; ever enabled (nothing is traced, no PMU MSR is written). Ring 0, pm32, TCG engine.
; Part 1. The TSC over a known sequence, as tsc_clock measures it with counters on:
;   rdtsc (t0) | mov esi | mov edi | mov ecx, 1000 | 1000 x (dec ecx, jnz) | rdtsc (t1)
; t1 - t0 = the first RDTSC, 2 MOVs, the MOV to ECX and 2000 loop instructions = 2004. On the
; host's clock (`--clock=host`, the default) the same delta measures the engine's speed instead
; (about 4 us of host time, ~8000 ticks at 2.1 GHz), so this check fails there.
; Part 2. The same sequence 100 times more, each delta 2004: time never runs on the host's clock
; in between (no lingering hook ends, nothing switches the source).
; Part 3. The LAPIC one-shot timer (100 000 bus ticks at divide-by-1, 100 us), armed twice: it
; fires in a spin loop, then during HLT, where the clock moves to its deadline at once. Both
; handlers read the TSC after the same instructions, so the ticks from arming to the handler
; differ only by where the interrupt is taken (the spin loop's boundary after the deadline, HLT's
; exactly at it): at most 4.
; Part 4. The RTC's periodic interrupt (register A 26H: 1024 Hz, 976 562.5 ns) on IRQ 8 through
; the slave 8259 (vector 28H), taken in a spin loop: with --clock=instructions the RTC runs on the
; guest's clock too (since 2026-11-28, session 21; docs/tcg-engine.md, "Guest time"), a deadline
; the engine stops at like the LAPIC's, so the TSC ticks between consecutive interrupts are the
; period in ticks each time, give or take the period's rounding to whole ticks and the spin loop's
; two instructions: the three deltas between four interrupts differ by at most 4, and each is
; more than 100 000 ticks (the period at any TSC above 103 MHz). On the host's clock they differ
; by the host's jitter, and before session 21 a running guest took them only at the end of the
; engine's 50-ms run slices.
; Expected: status 1 under vbts; QEMU's TSC runs on the host's clock (not run there, tests.cfg).
%include "rt.inc"
%include "cmos.inc"
%include "debug32.inc"

%define TIMER_VEC       0x40
%define TIMER_COUNT     100000

main:
        SET_HANDLER TIMER_VEC, timer_handler
        APIC_ENABLE
        call tsc_delta_2004
        CHECK_EQ eax, 2004, "TSC delta over 2004 instructions, nothing traced = 2004"
        CHECK_EQ edx, 0, "TSC delta high half 0"
        xor ebx, ebx                                            ; deltas other than 2004
        mov ebp, 100
.again: call tsc_delta_2004
        cmp eax, 2004
        je .same
        inc ebx
.same:  dec ebp
        jnz .again
        CHECK_EQ ebx, 0, "100 more measurements of the same sequence: every delta 2004"

        call timer_spin_then_hlt
        call check_spin_then_hlt
        call rtc_periodic_spin
        ret

rtc_periodic_spin:
        SET_HANDLER 0x28, rtc_handler
        mov dword [LVT_LINT0], 0x700                    ; ExtINT: the 8259s' interrupts
        mov eax, 0x2820                                 ; vector bases 20H, 28H; all masked
        call rt_pic_init32
        mov al, 0xFB                                    ; master: the cascade (IRQ 2)
        out 0x21, al
        mov al, 0xFE                                    ; slave: IRQ 8
        out 0xA1, al
        CMOS_WRITE 0x0A, 0x26                           ; 1024 Hz
        CMOS_READ 0x0C                                  ; any flag from before
        CMOS_WRITE 0x0B, 0x42                           ; PIE, 24-hour, BCD
        sti
.spin:  cmp dword [rtc_irqs], 4
        jb .spin
        cli
        CMOS_WRITE 0x0B, 0x02
        ; deltas between consecutive interrupts: min and max
        mov esi, rtc_tsc
        mov ebx, 0xFFFFFFFF                             ; min
        xor ebp, ebp                                    ; max
        mov ecx, 3
.delta: mov eax, [esi + 4]
        sub eax, [esi]
        cmp eax, ebx
        cmovb ebx, eax
        cmp eax, ebp
        cmova ebp, eax
        add esi, 4
        loop .delta
        mov [rtc_min], ebx
        mov eax, ebp
        sub eax, ebx
        cmp eax, 5
        setb al
        cmp al, 1
        REPORT "RTC periodic on instruction time: ticks between interrupts in a spin loop within 4"
        cmp dword [rtc_min], 100000
        seta al
        cmp al, 1
        REPORT "RTC periodic on instruction time: more than 100 000 ticks between interrupts"
        ret

rtc_handler:
        rdtsc
        mov ecx, [rtc_irqs]
        cmp ecx, 4
        jae .ack
        mov [rtc_tsc + 4 * ecx], eax
        inc dword [rtc_irqs]
.ack:   CMOS_READ 0x0C                                  ; register C: clears IRQF, lowers IRQ 8
        PIC_EOI_SLAVE
        ret

section .data
align 4
rtc_irqs:       dd 0
rtc_min:        dd 0
rtc_tsc:        times 4 dd 0
section .text

%include "tsc_timer.inc"

%include "end.inc"
