; tsc_moves: the TSC moves with the vCPU between the engines (docs/tcg-engine.md, "Switching
; engines", "Guest time"). Run with --engine=kvm-tcg: the guest starts on KVM; the WRMSR that
; enables PMC0 (instructions retired) makes vbts move it to the TCG engine, where the TSC runs
; one tick per instruction; the WRMSR that disables it moves it back to KVM.
;   t0 = RDTSC (KVM) | enable PMC0 | 8 NOPs | t1 = RDTSC | 1000 x (dec, jnz) | t2 = RDTSC (TCG)
;   | disable PMC0 | t3 = RDTSC (KVM)
; Checks: t0 < t1 < t2 < t3 (no step backwards at either move) and t2 - t1 = 2004 (the RDTSC,
; two MOVs that save it, MOV ECX and 2000 loop instructions, one tick each on instruction time).
; Expected: status 1 under vbts (westmere); QEMU TCG reports no arch perfmon: SKIP (155).
%include "rt.inc"
%include "debug32.inc"

main:
        PERFMON_REQUIRE 2, 1, .skip
        jmp .go
.skip:
        SKIP "arch perfmon v2 with a GP counter needed"
        ret
.go:
        WRMSR32 0x38F, 0
        WRMSR32 0xC1, 0
        WRMSR32 0x186, 0xC0 | (1 << 17) | (1 << 22)             ; PMC0: instructions, OS, EN
        rdtsc
        mov [t0], eax
        mov [t0 + 4], edx
        WRMSR32 0x38F, 1                                        ; counting: tracing on
        times 8 nop                     ; room for a move a few steps after the WRMSR (docs/tcg-engine.md)
        rdtsc
        mov esi, eax
        mov edi, edx
        mov ecx, 1000
.loop:  dec ecx
        jnz .loop
        rdtsc
        mov [t1], esi
        mov [t1 + 4], edi
        mov [t2], eax
        mov [t2 + 4], edx
        WRMSR32 0x38F, 0                                        ; tracing off
        rdtsc
        mov [t3], eax
        mov [t3 + 4], edx
        ; t1 > t0, t2 > t1, t3 > t2 (64-bit compares: high halves, then low halves)
        mov esi, t0
        call later
        CHECK_EQ eax, 1, "TSC after the move to TCG > TSC before it"
        mov esi, t1
        call later
        CHECK_EQ eax, 1, "TSC advances in TCG"
        mov esi, t2
        call later
        CHECK_EQ eax, 1, "TSC after the move back to KVM > TSC before it"
        mov eax, [t2]
        sub eax, [t1]
        CHECK_EQ eax, 2004, "t2 - t1 = 2004 instructions on instruction time"
        ret

; EAX = 1 if the qword at ESI + 8 is above the qword at ESI, else 0.
later:
        mov edx, [esi + 12]
        cmp edx, [esi + 4]
        ja .yes
        jb .no
        mov edx, [esi + 8]
        cmp edx, [esi]
        ja .yes
.no:    xor eax, eax
        ret
.yes:   mov eax, 1
        ret

section .data
align 8
t0:     dq 0
t1:     dq 0
t2:     dq 0
t3:     dq 0

%include "end.inc"
