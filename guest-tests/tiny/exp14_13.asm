; exp14_13: book experiment 14-13, 64-bit interrupt-mode BTS: count the DS interrupts while a
; message is printed with BTS on (SDM vol. 3B 17.4.9.4; docs/pmu-model.md "Interrupt mode").
; Setup (64-bit ring 0, IF=1): an 8-record buffer, BTINT=1, threshold = maximum; LVT perfmon =
; vector 0x50. The PMI handler turns BTS off, counts, resets the index to base, unmasks the LVT
; entry, sends EOI and turns BTS back on as its last action, so its RET and the IRETQ are
; recorded: every interrupt leaves 2 records in the buffer.
; Branches while BTS is on, with MSG_LEN characters: the CALL of print_msg, one JMP per
; character, the taken JZ at the NUL, the RET: T = MSG_LEN + 3 (not-taken branches are not
; recorded; OUT is no branch). The first interrupt follows the 8th branch, every further one 6
; branches later (8 - 2 handler records):
;   P = (T - 8) / 6 + 1 (integer division, T >= 8), final index = 2 + (T - 8 - 6 (P - 1)).
; With the 41-byte message below: T = 44, P = 7, final index = 2 records.
; Expected: status 1 under vbts; QEMU TCG: SKIP, status 155.
%define RT_LONG_MODE 1
%include "rt.inc"
%include "debug64.inc"

%define NREC            8
%define MSG             "BTS interrupt mode: this line is traced!", 10
%strlen MSG_LEN_S       "BTS interrupt mode: this line is traced!"
%define MSG_LEN         (MSG_LEN_S + 1)
%define T_BRANCHES      (MSG_LEN + 3)
%define P_EXPECTED      ((T_BRANCHES - 8) / 6 + 1)
%define FINAL_INDEX     (2 + (T_BRANCHES - 8 - 6 * (P_EXPECTED - 1)))

main:
        BTS_REQUIRE64
        SET_HANDLER PMI_VEC, pmi_handler
        APIC_ENABLE
        mov edi, LVT_PERFMON            ; (a 64-bit absolute address needs a register)
        mov dword [rdi], PMI_VEC
        mov rdi, bts_buffer             ; interrupt mode, threshold = maximum
        mov ecx, NREC
        mov edx, NREC
        call dbg64_ds_init
        mov rsi, msg
        sti
        WRMSR64 MSR_DEBUGCTL, DBG_TR | DBG_BTS | DBG_BTINT
        call print_msg
        WRMSR64 MSR_DEBUGCTL, 0
        cli
        PRINT "DS interrupts: "
        mov eax, [pmi_count]
        PRINT_DEC
        PRINT ", final index: record "
        mov rax, [dbg64_ds_area + 8]
        sub rax, bts_buffer
        xor edx, edx
        mov ecx, 24
        div ecx
        PRINT_DEC
        NEWLINE
        CHECK_EQ qword [pmi_count], P_EXPECTED, "DS interrupts = (T - 8) / 6 + 1 = 7"
        mov rax, bts_buffer + 24 * FINAL_INDEX
        CHECK_EQ qword [dbg64_ds_area + 8], rax, "final index = 2 records"
        CHECK_EQ qword [bts_buffer + 0 + 8], pmi_ret_to, "last interrupt: record 0 = the handler's RET"
        mov rax, rt_isr_iret64
        CHECK_EQ qword [bts_buffer + 24], rax, "last interrupt: record 1 = the IRETQ"
        ret

; rsi = NUL-terminated message; no LSR polling (vbts's and QEMU's 16550 always take a byte):
; exactly one taken JMP per character, the taken JZ at the end, and the RET.
print_msg:
        mov dx, 0x3F8
.next:
        mov al, [rsi]
        test al, al
        jz .done
        out dx, al
        inc rsi
        jmp .next
.done:
        ret

; rbx = frame (idt64.inc)
pmi_handler:
        WRMSR64 MSR_DEBUGCTL, 0
        inc qword [pmi_count]
        mov qword [dbg64_ds_area + 8], bts_buffer
        mov edi, LVT_PERFMON
        and dword [rdi], ~(1 << 16)
        mov edi, LAPIC_BASE + LAPIC_EOI
        mov dword [rdi], 0
        WRMSR64 MSR_DEBUGCTL, DBG_TR | DBG_BTS | DBG_BTINT
        ret                             ; -> pmi_ret_to (in the common stub): recorded
pmi_ret_to  equ rt_isr_after_call64

section .data
align 8
pmi_count:      dq 0
msg:            db MSG, 0

section .bss
alignb 64
bts_buffer:     resb 24 * NREC

%include "end.inc"
