; user_fault_pm32: faults raised by ring-3 code in 32-bit protected mode. For each case the
; kernel IRETs to a ring-3 snippet (rt_enter_user32, stack rt_ustack_top); the one ring-0
; handler (vectors 0, 6, 13) records the frame and calls rt_return_to_kernel32 with the vector,
; so the kernel continues after ENTER_USER and checks vector, error code and faulting EIP:
;   de_site:  div ecx (ECX=0)  -> #DE (0),  no error code (stub pushes 0), EIP = de_site
;   ud_site:  ud2              -> #UD (6),  no error code,                  EIP = ud_site
;   cli_site: cli (IOPL 0)     -> #GP (13), error 0,                        EIP = cli_site
;   int_site: int 0x42, gate DPL 0 -> #GP (13), error = 0x42*8 + 2 (IDT bit) = 0x212, EIP = int_site
; Faults push the address of the faulting instruction itself, and CS = 0x1b, SS:ESP =
; 0x23:rt_ustack_top (the snippets push nothing).
; Expected: status 1, output user_fault_pm32.expected.
%include "rt.inc"

; FAULT_CASE name, site, vector, error
%macro FAULT_CASE 4
        mov dword [f_vec], -1
        xor ecx, ecx                    ; rt_enter_user32 keeps ECX: the #DE divisor
        ENTER_USER %2, rt_ustack_top
        CHECK_EQ eax, %3, %1, ": handler returned to kernel with the vector"
        CHECK_EQ dword [f_vec], %3, %1, ": frame vector"
        CHECK_EQ dword [f_err], %4, %1, ": error code"
        CHECK_EQ dword [f_eip], %2, %1, ": faulting EIP"
        CHECK_EQ dword [f_cs], SEL_UCODE32, %1, ": frame CS = 0x1b"
        CHECK_EQ dword [f_ss], SEL_UDATA, %1, ": frame SS = 0x23"
        CHECK_EQ dword [f_esp], rt_ustack_top, %1, ": frame ESP = rt_ustack_top"
%endmacro

main:
        SET_HANDLER 0, fault_handler
        SET_HANDLER 6, fault_handler
        SET_HANDLER 13, fault_handler
        FAULT_CASE "user #DE", de_site, 0, 0
        FAULT_CASE "user #UD", ud_site, 6, 0
        FAULT_CASE "user #GP cli", cli_site, 13, 0
        FAULT_CASE "user #GP int to DPL0 gate", int_site, 13, 0x42 * 8 + 2
        xor eax, eax
        mov ax, cs
        CHECK_EQ eax, SEL_KCODE32, "back in ring 0: CS = 0x08"
        ret

; ---- ring 3 snippets
de_site:
        div ecx                         ; ECX = 0: FAULT_CASE clears it before entering ring 3
        ud2
ud_site:
        ud2
cli_site:
        cli
        ud2
int_site:
        int 0x42
        ud2

; ---- ring 0 handler (EBX = frame)
fault_handler:
        mov eax, [ebx + F32_VECTOR]
        mov [f_vec], eax
        mov eax, [ebx + F32_ERROR]
        mov [f_err], eax
        mov eax, [ebx + F32_EIP]
        mov [f_eip], eax
        movzx eax, word [ebx + F32_CS]
        mov [f_cs], eax
        movzx eax, word [ebx + F32_SS]
        mov [f_ss], eax
        mov eax, [ebx + F32_ESP]
        mov [f_esp], eax
        mov eax, [f_vec]
        RETURN_TO_KERNEL

section .data
align 4
f_vec:          dd 0
f_err:          dd 0
f_eip:          dd 0
f_cs:           dd 0
f_ss:           dd 0
f_esp:          dd 0

%include "end.inc"
