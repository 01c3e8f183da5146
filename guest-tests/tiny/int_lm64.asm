; int_lm64: the int_pm32 sequence in 64-bit long mode, plus long-mode/paging sanity checks.
;  0. EFER.LMA is set; the high alias RT_ALIAS (0xFFFFFFF8_10000000) maps PA 1 MiB: the Multiboot
;     magic reads through it, a write through it is seen at the identity address, and code
;     called through it finds its own RIP (lea rip-relative) = RT_ALIAS + (alias_fn - 1 MiB).
;  1. ring 0: INT 0x40 -> handler -> IRETQ; the frame has CS=KCODE64, RIP = ret_ring0,
;     SS:RSP = KDATA:RSP before the INT (64-bit frames always have SS:RSP).
;  2. IRETQ to 64-bit ring 3; INT 0x40 through a DPL3 gate: CS = UCODE64 (0x2b), SS:RSP =
;     UDATA:rt_ustack_top-8 (one push), handler on the TSS.RSP0 stack; IRETQ back to ring 3.
;     (Ring 3 checks CS&3 = 3, not CS itself: a host running CPL3 natively may show its own CS.)
;  3. ring 3 INT 0x41 -> rt_return_to_kernel64 with ring 3's RAX.
; Expected: status 1, output int_lm64.expected.
%define RT_LONG_MODE 1
%include "rt.inc"

%define H40_RESULT  0x1234C040          ; < 2^31: PUSH/MOV imm32 sign-extend in 64-bit code
%define USER_PUSH   0x55AA55AA
%define USER_EXIT   0x600DF00D

; LOAD_ALIAS reg, label, tmp: reg = RT_ALIAS + (label - 1 MiB). Done at run time: an ELF32
; relocation cannot hold the 64-bit sum.
%macro LOAD_ALIAS 3
        mov %1, %2
        mov %3, RT_ALIAS - RT_LOAD_ADDR
        add %1, %3
%endmacro

main:
        SET_HANDLER 0x40, handler_40
        SET_HANDLER 0x41, handler_41
        GATE_DPL 0x40, 3
        GATE_DPL 0x41, 3
        ; ---- 0. long mode and the alias
        mov eax, [MBX_MODE]
        CHECK_EQ rax, 64, "mailbox mode = 64"
        mov ecx, 0xC0000080
        rdmsr
        and eax, 1 << 10                ; EFER.LMA
        CHECK_EQ rax, 1 << 10, "EFER.LMA set"
        mov rcx, RT_ALIAS               ; = alias of RT_LOAD_ADDR (the header)
        mov eax, [rcx]
        CHECK_EQ rax, MB_MAGIC, "alias read: header magic at 0xfffffff810000000"
        LOAD_ALIAS rcx, alias_var, rdx
        mov dword [rcx], 0x5A5AA5A5
        mov eax, [alias_var]
        CHECK_EQ rax, 0x5A5AA5A5, "alias write seen at identity address"
        LOAD_ALIAS rcx, alias_fn, rdx
        call rcx
        LOAD_ALIAS rdx, alias_fn, rcx
        CHECK_EQ rax, rdx, "alias exec: rip-relative lea sees the alias address"
        ; ---- 1. ring 0
        xor eax, eax
        mov [rsp_before], rsp
        int 0x40
ret_ring0:
        CHECK_EQ rax, H40_RESULT, "ring0 int 0x40: handler's RAX returned by IRETQ"
        CHECK_EQ qword [h40_count], 1, "ring0 int 0x40: handler ran once"
        CHECK_EQ qword [h40_rip], ret_ring0, "ring0 int 0x40: frame RIP = ret_ring0"
        CHECK_EQ qword [h40_cs], SEL_KCODE64, "ring0 int 0x40: frame CS = 0x38"
        CHECK_EQ qword [h40_ss], SEL_KDATA, "ring0 int 0x40: frame SS = 0x10"
        mov rax, [rsp_before]
        CHECK_EQ qword [h40_rsp], rax, "ring0 int 0x40: frame RSP = RSP before int"
        mov eax, [MBX_VECTOR]
        CHECK_EQ rax, 0x40, "ring0 int 0x40: mailbox vector"
        ; ---- 2 + 3. ring 3
        ENTER_USER user_main, rt_ustack_top
        CHECK_EQ rax, USER_EXIT, "ring3 int 0x41: returned to kernel with ring 3's RAX"
        CHECK_EQ qword [h40_count], 2, "ring3 int 0x40: handler ran"
        CHECK_EQ qword [h40_cs], SEL_UCODE64, "ring3 int 0x40: frame CS = 0x2b (RPL 3)"
        CHECK_EQ qword [h40_rip], ret_ring3, "ring3 int 0x40: frame RIP = ret_ring3"
        CHECK_EQ qword [h40_ss], SEL_UDATA, "ring3 int 0x40: frame SS = 0x23"
        CHECK_EQ qword [h40_rsp], rt_ustack_top - 8, "ring3 int 0x40: frame RSP = rt_ustack_top-8"
        CHECK_EQ qword [h40_on_istack], 1, "ring3 int 0x40: handler ran on TSS.RSP0 stack"
        CHECK_EQ qword [user_rax], H40_RESULT, "ring3 int 0x40: IRETQ to ring 3 with handler's RAX"
        CHECK_EQ qword [user_cpl], 3, "ring3 int 0x40: IRETQ returned to CPL 3"
        CHECK_EQ qword [user_popped], USER_PUSH, "ring3 int 0x40: user stack intact"
        CHECK_EQ qword [h41_cs], SEL_UCODE64, "ring3 int 0x41: frame CS = 0x2b"
        CHECK_EQ qword [h41_rip], ret_exit, "ring3 int 0x41: frame RIP = ret_exit"
        xor eax, eax
        mov ax, cs
        CHECK_EQ rax, SEL_KCODE64, "back in ring 0: CS = 0x38"
        ret

; Runs at its alias address; returns its own RIP-relative address in RAX.
alias_fn:
        lea rax, [rel alias_fn]
        ret

; ---- ring 3 code (CS=0x2b, SS=0x23, IF=0)
user_main:
        push qword USER_PUSH
        xor eax, eax
        int 0x40
ret_ring3:
        mov [user_rax], rax
        xor eax, eax
        mov ax, cs
        and eax, 3
        mov [user_cpl], rax
        pop rax
        mov [user_popped], rax
        mov eax, USER_EXIT
        int 0x41
ret_exit:
        ud2

; ---- ring 0 handlers (RBX = frame)
handler_40:
        inc qword [h40_count]
        mov rax, [rbx + F64_RIP]
        mov [h40_rip], rax
        movzx eax, word [rbx + F64_CS]
        mov [h40_cs], rax
        movzx eax, word [rbx + F64_SS]
        mov [h40_ss], rax
        mov rax, [rbx + F64_RSP]
        mov [h40_rsp], rax
        lea rax, [rbx + F64_SS + 8]     ; top of the frame
        mov rcx, rt_istack_top
        cmp rax, rcx
        sete al
        movzx eax, al
        mov [h40_on_istack], rax
        mov qword [rbx + F64_RAX], H40_RESULT
        ret

handler_41:
        mov rax, [rbx + F64_RIP]
        mov [h41_rip], rax
        movzx eax, word [rbx + F64_CS]
        mov [h41_cs], rax
        mov rax, [rbx + F64_RAX]
        RETURN_TO_KERNEL

section .data
align 8
alias_var:      dq 0
rsp_before:     dq 0
h40_count:      dq 0
h40_rip:        dq 0
h40_cs:         dq 0
h40_ss:         dq 0
h40_rsp:        dq 0
h40_on_istack:  dq 0
h41_rip:        dq 0
h41_cs:         dq 0
user_rax:       dq 0
user_cpl:       dq 0
user_popped:    dq 0

%include "end.inc"
