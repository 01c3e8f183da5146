; guards_lm64: guards_pm32 in 64-bit long mode (docs/completion.md, "Free run with guards").
; Ring 3 runs natively on this PVM host, where KVM's breakpoints never fire and CPUID is the
; host's own instruction: that is the documented exception to vbts's CPUID guarantee.
;  1. CPUID leaf 1 at CPL0 (an image site): prints EDX; vbts answers from the CPU model
;     (westmere: 0x07abfbff) on any host.
;  2. CPUID leaf 1 at CPL3: prints EDX. Under vbts's default on this host: the host CPU's leaf 1
;     (native ring 3); with --exact-cpuid (TF-trick stepping) or on VT-x/SVM: the model's.
;     Checked by vmm/guards_kvmtest.cc, not tests.cfg.
;  3. ring-3 INT3 through a DPL3 gate: #BP handler once, frame RIP = after int3, CS RPL 3.
;     ring-3 INT 0x40 through a DPL3 gate: handler once, RIP = after the INT (host #UD taken back).
;  4. UD2 at ring 0 and ring 3: the guest's #UD handler runs with RIP = the UD2.
; Expected: status 1, the lines in tests.cfg.
%define RT_LONG_MODE 1
%include "rt.inc"

%define USER_EXIT   0x600DF00D

main:
        SET_HANDLER 3, handler_bp
        SET_HANDLER 6, handler_ud
        SET_HANDLER 0x40, handler_40
        SET_HANDLER 0x41, handler_41
        GATE_DPL 3, 3
        GATE_DPL 0x40, 3
        GATE_DPL 0x41, 3
        ; ---- 1. CPUID at CPL0 (an image site)
        mov eax, 1
        xor ecx, ecx
        cpuid
        mov [edx_cpl0], edx
        ; ---- 4a. UD2 at ring 0
        ud2
after_ud_ring0:
        CHECK_EQ qword [ud_count], 1, "ring0 ud2: #UD handler ran"
        CHECK_EQ qword [ud_rip], after_ud_ring0 - 2, "ring0 ud2: frame RIP = the ud2"
        CHECK_EQ qword [ud_cs], SEL_KCODE64, "ring0 ud2: frame CS = 0x38"
        ; ---- ring 3: 2 (CPUID), 3 (INT3, INT 0x40), 4b (UD2)
        ENTER_USER user_main, rt_ustack_top
        CHECK_EQ rax, USER_EXIT, "ring3 int 0x41: returned to kernel with ring 3's RAX"
        CHECK_EQ qword [bp_count], 1, "ring3 int3: #BP handler ran once"
        CHECK_EQ qword [bp_rip], after_int3, "ring3 int3: frame RIP = after int3"
        CHECK_EQ qword [bp_cpl], 3, "ring3 int3: frame CS RPL = 3"
        CHECK_EQ qword [h40_count], 1, "ring3 int 0x40: handler ran once"
        CHECK_EQ qword [h40_rip], after_int40, "ring3 int 0x40: frame RIP = after int 0x40"
        CHECK_EQ qword [ud_count], 2, "ring3 ud2: #UD handler ran"
        CHECK_EQ qword [ud_rip], after_ud_ring3 - 2, "ring3 ud2: frame RIP = the ud2"
        CHECK_EQ qword [ud_cpl], 3, "ring3 ud2: frame CS RPL = 3"
        PRINT "guards: cpl0 leaf1 edx="
        mov eax, [edx_cpl0]
        PRINT_HEX32
        NEWLINE
        PRINT "guards: cpl3 leaf1 edx="
        mov eax, [edx_cpl3]
        PRINT_HEX32
        NEWLINE
        ret

; ---- ring 3 (CS=0x2b, SS=0x23, IF=0)
user_main:
        mov eax, 1
        xor ecx, ecx
        cpuid
        mov [edx_cpl3], rdx
        int3
after_int3:
        int 0x40
after_int40:
        ud2
after_ud_ring3:
        mov eax, USER_EXIT
        int 0x41
        ud2                             ; never: 0x41 does not return here

; ---- ring 0 handlers (RBX = frame)
handler_bp:
        inc qword [bp_count]
        mov rax, [rbx + F64_RIP]
        mov [bp_rip], rax
        movzx eax, word [rbx + F64_CS]
        and eax, 3
        mov [bp_cpl], rax
        ret
handler_40:
        inc qword [h40_count]
        mov rax, [rbx + F64_RIP]
        mov [h40_rip], rax
        ret
handler_ud:
        inc qword [ud_count]
        mov rax, [rbx + F64_RIP]
        mov [ud_rip], rax
        add qword [rbx + F64_RIP], 2    ; step over the ud2
        movzx eax, word [rbx + F64_CS]
        mov [ud_cs], rax
        and eax, 3
        mov [ud_cpl], rax
        ret
handler_41:
        mov rax, [rbx + F64_RAX]
        RETURN_TO_KERNEL

section .data
align 8
edx_cpl0:       dq 0
edx_cpl3:       dq 0
bp_count:       dq 0
bp_rip:         dq 0
bp_cpl:         dq 0
h40_count:      dq 0
h40_rip:        dq 0
ud_count:       dq 0
ud_rip:         dq 0
ud_cs:          dq 0
ud_cpl:         dq 0

%include "end.inc"
