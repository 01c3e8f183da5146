; tsc_clock: the TSC, the LAPIC timer and the cycle counters on one clock while the TCG engine
; counts every instruction (vcpu/guest_clock.h, docs/tcg-engine.md "Guest time"): one TSC tick,
; one core cycle and one reference cycle per retired instruction, as the virtual PMU counts
; them (docs/pmu-model.md). Ring 0, pm32; runs on the TCG engine only (vbts_args): under KVM
; the TSC is the host's.
; Part 1. PMC0 counts instructions retired (C0H), PMC1 unhalted reference cycles (3CH/01H), both
; OS; the WRMSR of GLOBAL_CTRL = 3 turns them on, and with them instruction time:
;   rdtsc (t0) | mov esi | mov edi | mov ecx, 1000 | 1000 x (dec ecx, jnz) | rdtsc (t1)
; t1 - t0 = the instructions retired between the two RDTSCs: the first RDTSC, 2 MOVs, the MOV
; to ECX and 2000 loop instructions = 2004.
; Then WRMSR IA32_TSC = 0x9_12345678 and RDTSC at once: the TSC reads the written value plus the
; WRMSR itself (SDM vol. 3B 17.17: a write sets the counter, which then counts on) = 0x9_12345679.
; GLOBAL_CTRL = 0 stops both counters (that WRMSR is not counted): PMC1 = PMC0, reference
; cycles counted one per instruction like the TSC.
; Part 2. The LAPIC timer on instruction time (counters on again): a one-shot of 100 000 bus
; ticks (100 us at divide-by-1) fires in a counted spin loop, and then, armed the same way,
; during HLT, where instruction time jumps to its deadline. Both handlers read the TSC after the
; same instructions; the ticks from arming to the handler differ only by where the interrupt
; is taken (the spin loop's boundary after the deadline, HLT's exactly at it): at most 4.
; Part 3. Counters off (GLOBAL_CTRL = 0): the engine's code hook that counted every instruction
; lingers, unused, for 100 ms of host time (adding or removing it retranslates all code) and
; still sees every instruction, so the clock stays on instructions (docs/tcg-engine.md, "Guest
; time"): the same RDTSC-to-RDTSC sequence as in part 1 measures 2004 again. (On host time it
; would measure the engine's speed; a host that stalls vbts for 100 ms inside these few
; microseconds of guest code would end the linger.)
; Part 4. Still with the counters off: the one-shot timer armed as in part 2 fires in a spin loop
; after the same number of ticks, within 4: on the lingering hook's instruction time the run ends
; at the instruction where the deadline has passed (TcgCpu::SetLingeringStopAt), as the counting
; hook ends it in part 2.
; Expected: status 1 under vbts (westmere); QEMU TCG reports no arch perfmon: SKIP (155).
%include "rt.inc"
%include "debug32.inc"

%define TIMER_VEC       0x40
%define TIMER_COUNT     100000

main:
        PERFMON_REQUIRE 2, 2, .skip
        test bl, 4                                              ; EBX bit 2 = 0: reference cycles available
        jz .go
.skip:
        SKIP "arch perfmon v2 with reference cycles needed"
        ret
.go:
        SET_HANDLER TIMER_VEC, timer_handler
        APIC_ENABLE
        WRMSR32 0x38F, 0
        WRMSR32 0xC1, 0                                         ; PMC0
        WRMSR32 0xC2, 0                                         ; PMC1
        WRMSR32 0x186, 0xC0 | (1 << 17) | (1 << 22)             ; PMC0: instructions retired, OS, EN
        WRMSR32 0x187, 0x13C | (1 << 17) | (1 << 22)            ; PMC1: reference cycles, OS, EN
        mov ecx, 0x38F
        mov eax, 3
        xor edx, edx
        wrmsr                                                   ; PMC0, PMC1 on: instruction time
        call tsc_delta_2004
        mov [t_delta], eax
        mov [t_delta + 4], edx
        mov ecx, 0x10
        mov eax, 0x12345678
        mov edx, 0x9
        wrmsr                                                   ; IA32_TSC = 0x9_12345678
        rdtsc
        mov [t_written], eax
        mov [t_written + 4], edx
        mov ecx, 0x38F
        xor eax, eax
        xor edx, edx
        wrmsr                                                   ; counters off
        CHECK_EQ dword [t_delta], 2004, "TSC delta over 2004 retired instructions = 2004"
        CHECK_EQ dword [t_delta + 4], 0, "TSC delta high half 0"
        CHECK_EQ dword [t_written], 0x12345679, "TSC after WRMSR IA32_TSC = 0x912345678 is the value + 1 (the WRMSR)"
        CHECK_EQ dword [t_written + 4], 9, "TSC high half after the write = 9"
        mov ecx, 0xC1
        rdmsr
        mov esi, eax
        mov ecx, 0xC2
        rdmsr
        CHECK_EQ eax, esi, "reference cycles (PMC1) = instructions retired (PMC0)"
        cmp esi, 2004
        CHECK_CC a, "PMC0 counted more than the 2004 measured instructions"

        ; ---- part 2: the LAPIC timer on instruction time
        WRMSR32 0x38F, 3                                        ; counters on again
        call timer_spin_then_hlt
        WRMSR32 0x38F, 0
        call check_spin_then_hlt

        ; ---- part 3: counters off, the lingering hook keeps instruction time
        call tsc_delta_2004
        CHECK_EQ eax, 2004, "counters off, TSC delta over the same 2004 instructions = 2004"

        ; ---- part 4: the timer on the lingering hook's instruction time
        call arm_timer
        sti
.spin4: cmp dword [timer_count], 3
        jne .spin4
        cli
        mov eax, [handler_tsc]
        sub eax, [arm_tsc]
        sub eax, [spin_ticks]
        jns .abs4
        neg eax
.abs4:  cmp eax, 4
        CHECK_CC be, "counters off, ticks from arming to the handler as in part 2's spin loop within 4"
        ret

%include "tsc_timer.inc"

section .data
align 8
t_delta:        dq 0
t_written:      dq 0

%include "end.inc"
