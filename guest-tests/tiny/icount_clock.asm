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
; Expected: status 1 under vbts; QEMU's TSC runs on the host's clock (not run there, tests.cfg).
%include "rt.inc"
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
        ret

%include "tsc_timer.inc"

%include "end.inc"
