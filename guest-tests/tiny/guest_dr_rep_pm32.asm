; guest_dr_rep_pm32: the guest's own data breakpoints hit by one iteration of a REP string
; instruction, 32-bit ring 0. SDM vol. 3B 17.3.1.2: "Repeated INS, MOVS, OUTS, or STOS
; instructions generate a data-breakpoint debug exception after the iteration in which the
; memory address breakpoint condition occurred"; with iterations left, the #DB frame's EIP is
; the string instruction itself and ECX counts the iterations still to run, so that the IRETD
; resumes the rest.
;  1. DR0 = copy_dst+5, R/W0=01 (write), LEN0=00 (byte), L0: `rep movsb` of 8 bytes from
;     copy_src to copy_dst writes copy_dst+5 in its sixth iteration: one #DB, EIP = rep_b,
;     ECX = 8 - 6 = 2, DR6.B0; the last two iterations hit nothing and all 8 bytes arrive.
;  2. DR2 = dsrc+12, R/W2=11 (read or write), LEN2=11 (dword), L2: `rep movsd` of 4 dwords
;     from dsrc reads dsrc+12 in its fourth and last iteration: one #DB, after the whole
;     instruction (nothing left): EIP = after_d, ECX = 0, DR6.B2.
; The MOV to DR7 that enables a data breakpoint makes vbts follow the guest (docs/tracing.md).
; On the TCG engine QEMU runs each iteration as its own block and the engine reports the hit
; during it; this PVM host's KVM instruction emulator runs a ring-0 REP string instruction
; whole in one single step, so the KVM engine (`--engine=kvm`) cannot stop after an iteration
; here (docs/tracing.md); the image is not among the KVM engine's diff tests.
; After the last iteration the CPU has finished the instruction, so a trap it causes has the
; next instruction's EIP (SDM vol. 3A 6.5: a trap's return address is the instruction after
; the trapping one; Bochs's REP loop, modelled on the hardware, also returns with the
; instruction complete when the count reaches 0); QEMU 7.2 stops at the instruction once more
; with the count at 0 and puts its EIP in the frame: under QEMU TCG case 2's EIP check fails
; (tests.cfg, guest_dr_rep_pm32.qemu.expected), and vbts's TCG engine corrects it
; (docs/tcg-engine.md, "The guest's data breakpoints").
; Expected: status 1, output guest_dr_rep_pm32.expected.
%include "rt.inc"
%include "db_data.inc"

main:
        SET_HANDLER 1, db_data_handler
        ; ---- 1. REP MOVSB, a write breakpoint hit in iteration 6 of 8
        mov eax, copy_dst + 5
        mov dr0, eax
        mov eax, (1 << 0) | (01b << 16) | (00b << 18)   ; L0, RW0=01, LEN0=00
        mov dr7, eax
        mov esi, copy_src
        mov edi, copy_dst
        mov ecx, 8
        cld
rep_b:
        rep movsb
        xor eax, eax
        mov dr7, eax
        CHECK_EQ dword [db_count], 1, "REP MOVSB: one #DB, for the iteration that wrote copy_dst+5"
        CHECK_EQ dword [db_eip], rep_b, "REP MOVSB: iterations left, so EIP = the REP MOVSB"
        CHECK_EQ dword [db_ecx], 2, "REP MOVSB: ECX = 2 at the #DB (6 of 8 bytes copied)"
        CHECK_DR6 1, "REP MOVSB: DR6.B0"
        CHECK_EQ dword [copy_dst + 4], 0x08070605, "REP MOVSB: all 8 bytes copied in the end"

        ; ---- 2. REP MOVSD, a read/write breakpoint hit by the last iteration's read
        mov dword [db_count], 0
        mov dword [db_ecx], 0xFFFFFFFF
        mov eax, dsrc + 12
        mov dr2, eax
        mov eax, (1 << 4) | (11b << 24) | (11b << 26)   ; L2, RW2=11, LEN2=11
        mov dr7, eax
        mov esi, dsrc
        mov edi, ddst
        mov ecx, 4
        rep movsd
after_d:
        xor eax, eax
        mov dr7, eax
        CHECK_EQ dword [db_count], 1, "REP MOVSD: one #DB, for the last iteration's read of dsrc+12"
        CHECK_EQ dword [db_eip], after_d, "REP MOVSD: nothing left, so EIP = the next instruction"
        CHECK_EQ dword [db_ecx], 0, "REP MOVSD: ECX = 0 at the #DB"
        CHECK_DR6 4, "REP MOVSD: DR6.B2"
        CHECK_EQ dword [ddst + 12], 0x44444444, "REP MOVSD: the last dword copied"
        ret

section .data
copy_src:       db 1, 2, 3, 4, 5, 6, 7, 8
copy_dst:       times 8 db 0
align 16
dsrc:           dd 0x11111111, 0x22222222, 0x33333333, 0x44444444
ddst:           times 4 dd 0

%include "end.inc"
