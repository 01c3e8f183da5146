; conforming_cpl_pm32: code in a conforming code segment runs at the caller's CPL (SDM vol. 3A
; 5.8.1.2), and vbts attributes its instructions to that CPL: a counter of instructions
; retired at CPL 1-3 only (IA32_PERFEVTSEL0 = INST_RETIRED.ANY_P, C0H, USR | EN) counts the
; ring-3 code's far CALL into a conforming DPL-0 segment, the instructions there and its far
; RET. The hardware, KVM (VMX defines the CPL as SS.DPL, SVM reports it there) and QEMU keep
; the descriptor's DPL 0 in CS; vbts keeps the CPL in CS.DPL (CpuState::cpl(),
; docs/tcg-engine.md, "Task switches"), so both engines count them at CPL 3.
; 32-bit ring 0, no paging. The image copies the runtime's GDT and adds 60H: a flat conforming
; code segment, DPL 0 (access byte 9EH).
; Counted at CPL 3 (PMC0 from 0, USR only; the enabling WRMSR runs at CPL 0):
;   user_main: mov eax, 1 (1) | call 60H:conf_fn as `call far [conf_ptr]` (2)
;   conf_fn (CS = 63H, CPL 3): inc eax (3) | mov [conf_cs], cs (4) | inc eax (5) | retf (6)
;   back: mov [user_eax], eax (7) | int 0x41 (8: retires at CPL 3; the delivery is no
;   instruction). Its handler at CPL 0 returns to the kernel, which disables the counter.
;   PMC0 = 8 (with the conforming code taken for CPL 0, 4).
; Also seen in ring 3: CS = 63H in conf_fn (its RPL the CPL), EAX = 3 after it.
; Expected: status 1 on both engines (westmere); QEMU TCG has no architectural perfmon: SKIP.
%include "rt.inc"
%include "debug32.inc"

%define SEL_CONF0       0x60

main:
        PERFMON_REQUIRE 2, 1, .skip
        SET_HANDLER 0x41, handler_41
        GATE_DPL 0x41, 3
        RT_GDT_COPY gdt
        mov dword [gdt + SEL_CONF0], 0x0000FFFF
        mov dword [gdt + SEL_CONF0 + 4], 0x00CF9E00
        lgdt [gdt_desc]
        WRMSR32 0xC1, 0                         ; PMC0
        WRMSR32 0x38F, 1                        ; GLOBAL_CTRL: PMC0
        WRMSR32 0x186, 0x4100C0                 ; PERFEVTSEL0: INST_RETIRED, USR, EN
        ENTER_USER user_main, rt_ustack_top
        WRMSR32 0x186, 0
        mov ecx, 0xC1
        rdmsr
        CHECK_EQ eax, 8, "PMC0 (USR only) = 8: the conforming segment's 4 instructions at CPL 3"
        CHECK_EQ dword [conf_cs], SEL_CONF0 | 3, "in the conforming segment: CS = 63H (RPL = CPL 3)"
        CHECK_EQ dword [user_eax], 3, "EAX = 3 after the far call"
        ret
.skip:
        SKIP "no architectural performance monitoring"
        ret

; ---- ring 3
user_main:
        mov eax, 1
        call far [conf_ptr]
        mov [user_eax], eax
        int 0x41

; ---- the conforming DPL-0 segment, entered from ring 3
conf_fn:
        inc eax
        mov [conf_cs], cs
        inc eax
        retf

; ---- ring 0: back to the kernel (not counted: USR only)
handler_41:
        mov ax, cs
        call rt_return_to_kernel32

section .data
        RT_GDT_SPACE 0x68
conf_ptr:       dd conf_fn
                dw SEL_CONF0 | 3
user_eax:       dd 0
conf_cs:        dd 0

%include "end.inc"
