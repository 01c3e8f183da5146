; guest_dr_pm32: the guest's own DR0-DR3 breakpoints in 32-bit protected mode, ring 0
; (SDM vol. 3B 17.2.4, 17.3.1: an instruction breakpoint is a fault taken before the
; instruction, with DR6.B0; the handler resumes past it by setting EFLAGS.RF in the frame;
; data breakpoints: see below).
;  1. DR0 = bp_insn (execute, L0): one #DB with EIP = bp_insn, DR6.B0; RF=1 in the frame lets
;     the IRETD re-execute bp_insn without a second #DB.
;  Data breakpoints are not checked here: this PVM host's instruction emulator never raises
;  them (measured, with and without vbts stepping; docs/host-support.md), and vbts does not
;  emulate them yet.
; Expected: status 1, output guest_dr_pm32.expected.
%include "rt.inc"

main:
        SET_HANDLER 1, db_handler
        ; ---- 1. instruction breakpoint
        mov eax, bp_insn
        mov dr0, eax
        mov eax, (1 << 0)               ; L0, RW0=00 (execute), LEN0=00
        mov dr7, eax
        xor ecx, ecx
bp_insn:
        inc ecx
        xor eax, eax
        mov dr7, eax
        CHECK_EQ ecx, 1, "instruction breakpoint: the instruction ran once after the #DB"
        CHECK_EQ dword [db_count], 1, "instruction breakpoint: one #DB"
        CHECK_EQ dword [db_eip], bp_insn, "instruction breakpoint: fault, EIP = bp_insn"
        mov eax, [db_dr6]
        and eax, 0x400F
        CHECK_EQ eax, 1, "instruction breakpoint: DR6.B0 (and not BS)"
        ret

; ebx = frame: record, clear DR6, resume with RF=1 (needed after an instruction breakpoint).
db_handler:
        inc dword [db_count]
        mov eax, [ebx + F32_EIP]
        mov [db_eip], eax
        mov eax, dr6
        mov [db_dr6], eax
        mov eax, 0xFFFF0FF0             ; DR6 with no B0-B3/BS (SDM 17.2.3 reserved-as-1 bits)
        mov dr6, eax
        or dword [ebx + F32_EFLAGS], 1 << 16
        ret

section .data
align 4
db_count:       dd 0
db_eip:         dd 0
db_dr6:         dd 0

%include "end.inc"
