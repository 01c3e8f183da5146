; int_pm32: software interrupts and privilege changes in 32-bit protected mode.
;  1. ring 0: INT 0x40 -> handler -> IRET; the frame has CS=KCODE32 and EIP = the label after INT,
;     and the handler's change to the saved EAX reaches the interrupted code.
;  2. IRET to ring 3 (rt_enter_user32); ring 3 pushes one dword and does INT 0x40 through a DPL3
;     gate: the ring-0 handler sees CS=UCODE32 (RPL 3), SS:ESP = UDATA:rt_ustack_top-4, and
;     IRETs back to ring 3, which checks it is still at CPL 3 and that its stack is intact.
;  3. ring 3 does INT 0x41 ("exit to kernel"): its handler calls rt_return_to_kernel32, so
;     rt_enter_user32 returns at ring 0 with the EAX ring 3 passed.
; Expected: status 1, output int_pm32.expected.
%include "rt.inc"

%define H40_RESULT  0xC0DE0040          ; written into the frame's EAX by the 0x40 handler
%define USER_PUSH   0x55AA55AA          ; the dword ring 3 pushes before INT 0x40
%define USER_EXIT   0x600DF00D          ; the value ring 3 hands to INT 0x41

main:
        SET_HANDLER 0x40, handler_40
        SET_HANDLER 0x41, handler_41
        GATE_DPL 0x40, 3
        GATE_DPL 0x41, 3
        ; ---- 1. ring 0
        xor eax, eax
        int 0x40
ret_ring0:
        CHECK_EQ eax, H40_RESULT, "ring0 int 0x40: handler's EAX returned by IRET"
        CHECK_EQ dword [h40_count], 1, "ring0 int 0x40: handler ran once"
        CHECK_EQ dword [h40_eip], ret_ring0, "ring0 int 0x40: frame EIP = ret_ring0"
        CHECK_EQ dword [h40_cs], SEL_KCODE32, "ring0 int 0x40: frame CS = 0x08"
        CHECK_EQ dword [MBX_VECTOR], 0x40, "ring0 int 0x40: mailbox vector"
        ; ---- 2 + 3. ring 3
        ENTER_USER user_main, rt_ustack_top
        CHECK_EQ eax, USER_EXIT, "ring3 int 0x41: returned to kernel with ring 3's EAX"
        CHECK_EQ dword [h40_count], 2, "ring3 int 0x40: handler ran"
        CHECK_EQ dword [h40_cs], SEL_UCODE32, "ring3 int 0x40: frame CS = 0x1b (RPL 3)"
        CHECK_EQ dword [h40_eip], ret_ring3, "ring3 int 0x40: frame EIP = ret_ring3"
        CHECK_EQ dword [h40_ss], SEL_UDATA, "ring3 int 0x40: frame SS = 0x23"
        CHECK_EQ dword [h40_esp], rt_ustack_top - 4, "ring3 int 0x40: frame ESP = rt_ustack_top-4"
        CHECK_EQ dword [h40_on_istack], 1, "ring3 int 0x40: handler ran on TSS.ESP0 stack"
        CHECK_EQ dword [user_eax], H40_RESULT, "ring3 int 0x40: IRET to ring 3 with handler's EAX"
        CHECK_EQ dword [user_cpl], 3, "ring3 int 0x40: IRET returned to CPL 3"
        CHECK_EQ dword [user_popped], USER_PUSH, "ring3 int 0x40: user stack intact"
        CHECK_EQ dword [h41_cs], SEL_UCODE32, "ring3 int 0x41: frame CS = 0x1b"
        CHECK_EQ dword [h41_eip], ret_exit, "ring3 int 0x41: frame EIP = ret_exit"
        xor eax, eax
        mov ax, cs
        CHECK_EQ eax, SEL_KCODE32, "back in ring 0: CS = 0x08"
        xor eax, eax
        mov ax, ss
        CHECK_EQ eax, SEL_KDATA, "back in ring 0: SS = 0x10"
        ret

; ---- ring 3 code (CS=0x1b, DS=SS=0x23, IF=0)
user_main:
        push dword USER_PUSH
        xor eax, eax
        int 0x40
ret_ring3:
        mov [user_eax], eax
        xor eax, eax
        mov ax, cs
        and eax, 3
        mov [user_cpl], eax
        pop eax
        mov [user_popped], eax
        mov eax, USER_EXIT
        int 0x41
ret_exit:
        ud2                             ; never: 0x41 does not return here

; ---- ring 0 handlers (EBX = frame)
handler_40:
        inc dword [h40_count]
        mov eax, [ebx + F32_EIP]
        mov [h40_eip], eax
        movzx eax, word [ebx + F32_CS]
        mov [h40_cs], eax
        test eax, 3
        jz .same_ring
        movzx eax, word [ebx + F32_SS]
        mov [h40_ss], eax
        mov eax, [ebx + F32_ESP]
        mov [h40_esp], eax
        ; the frame must sit at the top of the TSS.ESP0 stack: EBX + F32_SS + 4 = rt_istack_top
        lea eax, [ebx + F32_SS + 4]
        cmp eax, rt_istack_top
        sete al
        movzx eax, al
        mov [h40_on_istack], eax
.same_ring:
        mov dword [ebx + F32_EAX], H40_RESULT
        ret

handler_41:
        mov eax, [ebx + F32_EIP]
        mov [h41_eip], eax
        movzx eax, word [ebx + F32_CS]
        mov [h41_cs], eax
        mov eax, [ebx + F32_EAX]
        RETURN_TO_KERNEL

section .data
align 4
h40_count:      dd 0
h40_eip:        dd 0
h40_cs:         dd 0
h40_ss:         dd 0
h40_esp:        dd 0
h40_on_istack:  dd 0
h41_eip:        dd 0
h41_cs:         dd 0
user_eax:       dd 0
user_cpl:       dd 0
user_popped:    dd 0

%include "end.inc"
