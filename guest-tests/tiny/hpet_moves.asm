; hpet_moves: the HPET's counter goes on across the vCPU's moves between the engines (vmm/hpet.h,
; Hpet::Rebase): on KVM it runs on the host's monotonic clock, in TCG on the guest clock, which
; runs one tick per instruction while every instruction is counted. Run with --engine=kvm-tcg,
; as tsc_moves: the WRMSR that enables PMC0 moves the guest to the TCG engine, the one that
; disables it moves it back.
;   enable the HPET | h0 = counter (KVM) | enable PMC0 | 8 NOPs | h1 = counter | 1000 x (dec,
;   jnz) | h2 = counter (TCG) | disable PMC0 | h3 = counter (KVM)
; Checks: h0 < h1 < h2 < h3 (no step backwards at either move, and the counter runs in TCG), and
; h2 - h1 <= 200: 2004 instructions on instruction time are at most 2004 ns at a TSC of 1 GHz or
; more (the models' TSC is KVM's, some GHz), 200 ticks of 10 ns.
; Expected: status 1 under vbts (westmere); QEMU TCG reports no arch perfmon: SKIP (155).
%include "rt.inc"
%include "debug32.inc"
%include "hpet.inc"

main:
        PERFMON_REQUIRE 2, 1, .skip
        jmp .go
.skip:
        SKIP "arch perfmon v2 with a GP counter needed"
        ret
.go:
        mov dword [GCONF], ENABLE
        WRMSR32 0x38F, 0
        WRMSR32 0xC1, 0
        WRMSR32 0x186, 0xC0 | (1 << 17) | (1 << 22)             ; PMC0: instructions, OS, EN
        mov eax, [COUNTER]
        mov [h0], eax
        WRMSR32 0x38F, 1                                        ; counting: tracing on
        times 8 nop                     ; room for a move a few steps after the WRMSR (docs/tcg-engine.md)
        mov esi, [COUNTER]
        mov ecx, 1000
.loop:  dec ecx
        jnz .loop
        mov eax, [COUNTER]
        mov [h1], esi
        mov [h2], eax
        WRMSR32 0x38F, 0                                        ; tracing off
        mov eax, [COUNTER]
        mov [h3], eax
        mov dword [GCONF], 0
        mov eax, [h1]
        cmp eax, [h0]
        CHECK_CC a, "HPET counter after the move to TCG > before it"
        mov eax, [h2]
        cmp eax, [h1]
        CHECK_CC a, "HPET counter advances in TCG"
        mov eax, [h3]
        cmp eax, [h2]
        CHECK_CC a, "HPET counter after the move back to KVM > before it"
        mov eax, [h2]
        sub eax, [h1]
        cmp eax, 200
        CHECK_CC be, "h2 - h1 <= 200 ticks: 2004 instructions on instruction time"
        ret

section .data
align 4
h0:     dd 0
h1:     dd 0
h2:     dd 0
h3:     dd 0

%include "end.inc"
