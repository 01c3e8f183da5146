; user_fault_lm64: faults raised by 64-bit ring-3 code. For each case the kernel IRETQs to a
; ring-3 snippet (rt_enter_user64, stack rt_ustack_top, RCX preset by FAULT_CASE); the one
; ring-0 handler (vectors 0, 6, 13, 14) records the frame and CR2 and calls
; rt_return_to_kernel64 with the vector. Faults push the faulting instruction's own RIP.
;   de_site:    div rcx, RCX=0                 -> #DE (0),  error 0 (stub), RIP = de_site
;   ud_site:    ud2                            -> #UD (6),  error 0 (stub), RIP = ud_site
;   cli_site:   cli (IOPL 0)                   -> #GP (13), error 0,        RIP = cli_site
;   nc_site:    mov rax,[rcx], RCX=0x8000000000000000 (non-canonical) -> #GP (13), error 0
;   int_site:   int 0x42, gate DPL 0           -> #GP (13), error 0x42*8+2 = 0x212
;               (SDM: the error code's index field is the vector, in either mode. QEMU 7.2 TCG
;               pushes 0x42*16+2 = 0x422 in long mode: tests.cfg expects that one FAIL line there.)
;   pf_site:    mov [rcx],eax, RCX=0x40000000 (1 GiB: beyond the identity map, not present)
;               -> #PF (14), error = U(4)|W(2)|P(0) = 6, CR2 = 0x40000000
; Every frame has CS = 0x2b, SS = 0x23, RSP = rt_ustack_top.
; Expected: status 1, output user_fault_lm64.expected.
%define RT_LONG_MODE 1
%include "rt.inc"

; FAULT_CASE "name", site, vector, error, rcx
%macro FAULT_CASE 5
        mov qword [f_vec], -1
        mov rcx, %5                     ; rt_enter_user64 keeps RCX
        ENTER_USER %2, rt_ustack_top
        CHECK_EQ rax, %3, %1, ": handler returned to kernel with the vector"
        CHECK_EQ qword [f_vec], %3, %1, ": frame vector"
        CHECK_EQ qword [f_err], %4, %1, ": error code"
        CHECK_EQ qword [f_rip], %2, %1, ": faulting RIP"
        CHECK_EQ qword [f_cs], SEL_UCODE64, %1, ": frame CS = 0x2b"
        CHECK_EQ qword [f_ss], SEL_UDATA, %1, ": frame SS = 0x23"
        CHECK_EQ qword [f_rsp], rt_ustack_top, %1, ": frame RSP = rt_ustack_top"
%endmacro

main:
        SET_HANDLER 0, fault_handler
        SET_HANDLER 6, fault_handler
        SET_HANDLER 13, fault_handler
        SET_HANDLER 14, fault_handler
        FAULT_CASE "user #DE", de_site, 0, 0, 0
        FAULT_CASE "user #UD", ud_site, 6, 0, 0
        FAULT_CASE "user #GP cli", cli_site, 13, 0, 0
        FAULT_CASE "user #GP non-canonical", nc_site, 13, 0, 0x8000000000000000
        FAULT_CASE "user #GP int to DPL0 gate", int_site, 13, 0x42 * 8 + 2, 0
        FAULT_CASE "user #PF write not-present", pf_site, 14, 6, 0x40000000
        CHECK_EQ qword [f_cr2], 0x40000000, "user #PF write not-present: CR2"
        xor eax, eax
        mov ax, cs
        CHECK_EQ rax, SEL_KCODE64, "back in ring 0: CS = 0x38"
        ret

; ---- ring 3 snippets
de_site:
        div rcx                         ; RCX = 0 (RDX:RAX = user RSP:entry, irrelevant)
        ud2
ud_site:
        ud2
cli_site:
        cli
        ud2
nc_site:
        mov rax, [rcx]
        ud2
int_site:
        int 0x42
        ud2
pf_site:
        mov [rcx], eax
        ud2

; ---- ring 0 handler (RBX = frame)
fault_handler:
        mov rax, [rbx + F64_VECTOR]
        mov [f_vec], rax
        mov rax, [rbx + F64_ERROR]
        mov [f_err], rax
        mov rax, [rbx + F64_RIP]
        mov [f_rip], rax
        movzx eax, word [rbx + F64_CS]
        mov [f_cs], rax
        movzx eax, word [rbx + F64_SS]
        mov [f_ss], rax
        mov rax, [rbx + F64_RSP]
        mov [f_rsp], rax
        mov rax, cr2
        mov [f_cr2], rax
        mov rax, [f_vec]
        RETURN_TO_KERNEL

section .data
align 8
f_vec:          dq 0
f_err:          dq 0
f_rip:          dq 0
f_cs:           dq 0
f_ss:           dq 0
f_rsp:          dq 0
f_cr2:          dq 0

%include "end.inc"
