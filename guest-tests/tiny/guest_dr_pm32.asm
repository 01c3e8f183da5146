; guest_dr_pm32: the guest's own DR0-DR3 breakpoints in 32-bit protected mode, ring 0
; (SDM vol. 3B 17.2.4, 17.3.1: an instruction breakpoint is a fault taken before the
; instruction, with DR6.B0; the handler resumes past it by setting EFLAGS.RF in the frame;
; data breakpoints: see below).
;  1. DR0 = bp_insn (execute, L0): one #DB with EIP = bp_insn, DR6.B0; RF=1 in the frame lets
;     the IRETD re-execute bp_insn without a second #DB.
;  2. Data breakpoints (17.2.4, 17.3.1.2: a trap after the access, EIP = the next
;     instruction, DR6.Bn). DR1 = watch, RW1=01 (write), LEN1=11 (dword [watch, watch+4)):
;     a read of watch and a write of watch+4 do not trap; `mov byte [watch+2], 7` does, once,
;     with EIP = dbp_w_after and DR6.B1.
;  3. DR2 = watch2, RW2=11 (read/write), LEN2=00 (1 byte): `mov al, [watch2]` traps with
;     DR6.B2, EIP = dbp_r_after.
;  4. DR3 = the stack slot a PUSH writes (ESP-4 before it), RW3=01, LEN3=11: `push eax`
;     traps with DR6.B3, EIP = dbp_push_after.
;  This PVM host's instruction emulator never raises data breakpoints (probe `guest data bp
;  pm32, stepped`); vbts raises them while it steps the guest, so where the CPU model has
;  a PMU (CPUID.1:EDX.DS, a vbts model) the image counts instructions in PMC0, which makes
;  vbts step it (docs/tracing.md). QEMU TCG raises them itself.
; Expected: status 1, output guest_dr_pm32.expected.
%include "rt.inc"
%include "db_data.inc"

main:
        SET_HANDLER 1, db_data_handler
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
        CHECK_DR6 1, "instruction breakpoint: DR6.B0 (and not BS)"

        ; ---- vbts: make it step the guest (PMC0 counts instructions, no PMI)
        mov eax, 1
        cpuid
        test edx, 1 << 21
        jz .no_pmu
        mov ecx, 0x186                  ; IA32_PERFEVTSEL0: C0H instructions retired, USR|OS|EN
        mov eax, 0x004300C0
        xor edx, edx
        wrmsr
        mov ecx, 0x38F                  ; IA32_PERF_GLOBAL_CTRL: enable PMC0
        mov eax, 1
        wrmsr
.no_pmu:
        ; ---- 2. write breakpoint on a dword
        mov dword [db_count], 0
        mov eax, watch
        mov dr1, eax
        mov eax, (1 << 2) | (01b << 20) | (11b << 22)   ; L1, RW1=01, LEN1=11
        mov dr7, eax
        mov eax, [watch]                ; a read: RW1=01 ignores it
        mov dword [watch + 4], 5        ; outside [watch, watch+4)
        mov byte [watch + 2], 7         ; inside: trap after it
dbp_w_after:
        nop
        xor eax, eax
        mov dr7, eax
        CHECK_EQ dword [db_count], 1, "write breakpoint: one #DB (not for the read, not for watch+4)"
        CHECK_EQ dword [db_eip], dbp_w_after, "write breakpoint: trap, EIP = the next instruction"
        CHECK_DR6 2, "write breakpoint: DR6.B1"
        CHECK_EQ dword [watch], 0x00070000, "write breakpoint: the write happened"

        ; ---- 3. read/write breakpoint on a byte
        mov dword [db_count], 0
        mov eax, watch2
        mov dr2, eax
        mov eax, (1 << 4) | (11b << 24) | (00b << 26)   ; L2, RW2=11, LEN2=00
        mov dr7, eax
        mov al, [watch2 + 1]            ; next byte: no trap
        mov al, [watch2]
dbp_r_after:
        nop
        xor eax, eax
        mov dr7, eax
        CHECK_EQ dword [db_count], 1, "read/write breakpoint: one #DB for the read of watch2"
        CHECK_EQ dword [db_eip], dbp_r_after, "read/write breakpoint: EIP = the next instruction"
        CHECK_DR6 4, "read/write breakpoint: DR6.B2"

        ; ---- 4. write breakpoint on the stack slot PUSH writes
        mov dword [db_count], 0
        lea eax, [esp - 4]
        mov dr3, eax
        mov eax, (1 << 6) | (01b << 28) | (11b << 30)   ; L3, RW3=01, LEN3=11
        mov dr7, eax
        push eax
dbp_push_after:
        pop eax
        xor eax, eax
        mov dr7, eax
        CHECK_EQ dword [db_count], 1, "stack breakpoint: one #DB for the push (not the pop)"
        CHECK_EQ dword [db_eip], dbp_push_after, "stack breakpoint: EIP = the instruction after the push"
        CHECK_DR6 8, "stack breakpoint: DR6.B3"
        ret

section .data
align 8
watch:          dd 0, 0
watch2:         db 0x11, 0x22, 0, 0

%include "end.inc"
