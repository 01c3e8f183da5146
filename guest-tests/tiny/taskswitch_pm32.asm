; taskswitch_pm32: hardware task switches into a conforming code segment whose DPL (0) is below
; the RPL (3) of the CS selector in the new TSS (SDM vol. 3A 7.3, "Task Switching"; the CS
; rule as bare metal and KVM's emulator apply it: a nonconforming CS needs DPL = RPL, a
; conforming one DPL <= RPL — kvm-unit-tests' 32-bit taskswitch2 "lcall with cs.rpl !=
; cs.dpl", Linux commit 9a4cfb27f723; docs/tcg-engine.md, "Task switches"). QEMU 5.0/7.2
; require DPL = RPL for every code segment and raise #TS there.
; 32-bit ring 0, no paging. The image copies the runtime's GDT and adds:
;   60H a conforming code segment, DPL 0 (access byte 9EH), flat
;   68H, 70H, 78H available 32-bit TSSs A, B, C (type 9)
;   80H a task gate for the runtime's TSS (48H), DPL 3: CPL-3 code may JMP through it (a JMP
;       to the DPL-0 TSS descriptor itself is #GP(48H) at CPL 3: the TSS's DPL must be >= CPL)
; Each task starts at its own entry with CS = 63H (the conforming segment, RPL 3), SS = DS =
; ES = 23H (UDATA, DPL 3), EFLAGS = 2, ESP its own stack: it runs at CPL 3 (the RPL of CS), in
; a DPL-0 code segment. It records CS and SS, counts itself, and returns:
;   1. LCALL 68H:0 (a TSS): task A; the CALL writes the back link (48H, the runtime's TSS) into
;      A's TSS and sets NT; A's IRETD returns to the runtime's task after the LCALL. Afterwards
;      A's descriptor is available again (89H: IRET clears the busy flag of the task it leaves).
;   2. LJMP 70H:0: task B, whose `jmp 83H:0` (the task gate) goes back to the runtime's task
;      (which the LJMP left available) after the LJMP; B's descriptor is available again, the
;      runtime's busy (8BH).
;   3. INT 61H through a task gate (IDT entry: selector 78H, type 5, DPL 0): task C, NT set and
;      its back link 48H; its IRETD returns after the INT.
; Each check: the task ran once more, CS = 63H and SS = 23H there (CPL 3), the back link where
; one is written.
; Expected: status 1 under the TCG engine. The KVM engine leaves task switches to the host's KVM,
; which on this PVM host hands 32-bit ring 0 to vbts's completion engine, which performs none
; (status 118): tests.cfg runs it with --engine=tcg. QEMU: #TS (error code 0060H) at the LCALL:
; not run there.
%include "rt.inc"

%define SEL_CONF0       0x60            ; conforming code, DPL 0
%define SEL_TSS_A       0x68
%define SEL_TSS_B       0x70
%define SEL_TSS_C       0x78
%define SEL_GATE_RT     0x80            ; task gate to SEL_TSS32, DPL 3
%define TASK_CS         (SEL_CONF0 | 3)

main:
        ; the runtime's GDT, then ours
        RT_GDT_COPY gdt
        mov dword [gdt + SEL_CONF0], 0x0000FFFF
        mov dword [gdt + SEL_CONF0 + 4], 0x00CF9E00
        mov dword [gdt + SEL_GATE_RT], SEL_TSS32 << 16
        mov dword [gdt + SEL_GATE_RT + 4], 0x0000E500
        mov eax, tss_a
        mov edi, gdt + SEL_TSS_A
        call rt_tss_desc32
        mov eax, tss_b
        mov edi, gdt + SEL_TSS_B
        call rt_tss_desc32
        mov eax, tss_c
        mov edi, gdt + SEL_TSS_C
        call rt_tss_desc32
        lgdt [gdt_desc]
        ; the tasks
        mov edi, tss_a
        mov eax, task_a
        mov edx, stack_a_top
        call init_tss
        mov edi, tss_b
        mov eax, task_b
        mov edx, stack_b_top
        call init_tss
        mov edi, tss_c
        mov eax, task_c
        mov edx, stack_c_top
        call init_tss
        ; IDT 61H: a task gate to C
        mov dword [rt_idt32 + 0x61 * 8], SEL_TSS_C << 16
        mov dword [rt_idt32 + 0x61 * 8 + 4], 0x00008500

        ; ---- 1. LCALL to a TSS
        call SEL_TSS_A:0
        pushfd
        pop eax
        and eax, 1 << 14
        CHECK_EQ eax, 0, "LCALL: back in the runtime's task, NT clear"
        CHECK_EQ dword [runs], 1, "LCALL 68H: task A ran"
        CHECK_EQ dword [seen_cs], TASK_CS, "task A: CS = 63H (conforming DPL 0, RPL 3)"
        CHECK_EQ dword [seen_ss], SEL_UDATA, "task A: SS = 23H, CPL 3"
        CHECK_EQ dword [tss_a], SEL_TSS32, "task A's back link = 48H"
        movzx eax, byte [gdt + SEL_TSS_A + 5]
        CHECK_EQ eax, 0x89, "task A's descriptor available again after its IRETD"

        ; ---- 2. LJMP to a TSS
        jmp SEL_TSS_B:0
after_b:
        CHECK_EQ dword [runs], 2, "LJMP 70H: task B ran and jumped back"
        CHECK_EQ dword [seen_cs], TASK_CS, "task B: CS = 63H"
        movzx eax, byte [gdt + SEL_TSS_B + 5]
        CHECK_EQ eax, 0x89, "task B's descriptor available after its JMP away"
        movzx eax, byte [gdt + SEL_TSS32 + 5]
        CHECK_EQ eax, 0x8B, "the runtime's TSS busy again"

        ; ---- 3. INT through a task gate
        mov dword [seen_cs], 0
        int 0x61
        CHECK_EQ dword [runs], 3, "INT 61H through a task gate: task C ran"
        CHECK_EQ dword [seen_cs], TASK_CS, "task C: CS = 63H"
        CHECK_EQ dword [seen_nt], 1 << 14, "task C: NT set (nested by the interrupt)"
        CHECK_EQ dword [tss_c], SEL_TSS32, "task C's back link = 48H"
        ret

; edi = TSS, eax = EIP, edx = ESP
init_tss:
        mov dword [edi + 0x04], rt_istack_top   ; ESP0
        mov dword [edi + 0x08], SEL_KDATA       ; SS0
        mov ecx, cr3
        mov [edi + 0x1C], ecx
        mov [edi + 0x20], eax                   ; EIP
        mov dword [edi + 0x24], 2               ; EFLAGS: IF clear
        mov [edi + 0x38], edx                   ; ESP
        mov dword [edi + 0x48], SEL_UDATA       ; ES
        mov dword [edi + 0x4C], TASK_CS         ; CS
        mov dword [edi + 0x50], SEL_UDATA       ; SS
        mov dword [edi + 0x54], SEL_UDATA       ; DS
        mov word [edi + 0x66], 104              ; I/O map base: beyond the limit
        ret

; The tasks (CPL 3, conforming DPL-0 code).
task_note:
        mov ax, cs
        movzx eax, ax
        mov [seen_cs], eax
        mov ax, ss
        movzx eax, ax
        mov [seen_ss], eax
        pushfd
        pop eax
        and eax, 1 << 14
        mov [seen_nt], eax
        inc dword [runs]
        ret
task_a:
        call task_note
        iretd                                   ; NT: back to the runtime's task
task_b:
        call task_note
        jmp (SEL_GATE_RT | 3):0                 ; back to the runtime's task, after the LJMP
task_c:
        call task_note
        iretd

section .data
        RT_GDT_SPACE 0x88
align 16
tss_a:          times 104 db 0
tss_b:          times 104 db 0
tss_c:          times 104 db 0
runs:           dd 0
seen_cs:        dd 0
seen_ss:        dd 0
seen_nt:        dd 0
align 16
                times 256 db 0
stack_a_top:
                times 256 db 0
stack_b_top:
                times 256 db 0
stack_c_top:

%include "end.inc"
