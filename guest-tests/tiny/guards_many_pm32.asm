; guards_many_pm32: more CPUID sites than debug registers (docs/completion.md, "Code guards").
; Seven CPUID instructions of leaf 1, four at CPL0 and three at CPL3, each ANDed into one mask of
; EDX.DS (bit 21). A host that rewrites CPUID (this PVM host drops DS) has only 3 debug registers
; left for guards, so vbts patches UD2 over each site while the guest runs free; the #UD guard takes
; each #UD back and answers from the CPU model. A genuine UD2 at CPL0 still reaches the guest's
; handler. Expected: all seven answers equal (checked: AND = OR), printed; under vbts the model's
; (westmere 0x07abfbff, DS set), under QEMU TCG its own CPU's. Status 1.
%include "rt.inc"

%define USER_EXIT   0x600DF00D

%macro CPUID1_DS 0
        mov eax, 1
        xor ecx, ecx
        cpuid
        and [ds_mask], edx
        or [or_mask], edx
%endmacro

main:
        SET_HANDLER 6, handler_ud
        SET_HANDLER 0x41, handler_41
        GATE_DPL 0x41, 3
        mov dword [ds_mask], 0xFFFFFFFF
        CPUID1_DS
        CPUID1_DS
        CPUID1_DS
        CPUID1_DS
        ud2
after_ud:
        CHECK_EQ dword [ud_count], 1, "ring0 ud2: the guest's #UD handler ran"
        CHECK_EQ dword [ud_eip], after_ud - 2, "ring0 ud2: frame EIP = the ud2"
        ENTER_USER user_main, rt_ustack_top
        CHECK_EQ eax, USER_EXIT, "ring3: back in the kernel"
        mov eax, [ds_mask]
        CHECK_EQ eax, dword [or_mask], "all seven CPUIDs give the same EDX"
        PRINT "guards_many: leaf1 edx="
        mov eax, [ds_mask]
        PRINT_HEX32
        NEWLINE
        CHECK_EQ dword [ud_count], 1, "no other #UD reached the guest"
        ret

user_main:
        CPUID1_DS
        CPUID1_DS
        CPUID1_DS
        mov eax, USER_EXIT
        int 0x41
        ud2

handler_ud:
        inc dword [ud_count]
        mov eax, [ebx + F32_EIP]
        mov [ud_eip], eax
        add dword [ebx + F32_EIP], 2
        ret
handler_41:
        mov eax, [ebx + F32_EAX]
        RETURN_TO_KERNEL

section .data
align 4
ds_mask:        dd 0
or_mask:        dd 0
ud_count:       dd 0
ud_eip:         dd 0
%include "end.inc"
