; guards_pm32: what the supervisor's free-run guards must keep architectural (docs/completion.md,
; "Free run with guards"), in 32-bit protected mode. On a host that needs them (this PVM host)
; vbts runs this guest free: ring-3 INT3/INTO/INT n reach the guest as a host #UD, which the #UD
; guard takes back and completes; the two CPUIDs of the image are guarded sites.
;  1. CPUID leaf 1 at CPL0 and at CPL3 (image sites): prints EDX of each. vbts answers from the
;     CPU model (westmere: 0x07abfbff, DS = bit 21 set) on any host, guarded or stepped.
;  2. CPUID leaf 1 at CPL0 from a copy in .bss (not an image site): prints EDX. Under vbts's
;     default this is KVM's answer (on this host: the host's leaf 1 EDX, DS clear); with
;     --exact-cpuid, the model's. tests.cfg checks only 1.; vmm/guards_kvmtest.cc checks 2.
;  3. ring-3 INT3 and INTO (OF=1) through DPL3 gates: #BP / #OF handlers run once each with
;     frame CS RPL 3 and EIP = the next instruction (traps).
;  4. UD2 at ring 0 and at ring 3: the guest's #UD handler runs (a genuine #UD still reaches the
;     guest) with EIP = the UD2 (a fault); the handler steps over it.
; Expected: status 1, the lines in tests.cfg.
%include "rt.inc"

%define USER_EXIT   0x600DF00D

main:
        SET_HANDLER 3, handler_bp
        SET_HANDLER 4, handler_of
        SET_HANDLER 6, handler_ud
        SET_HANDLER 0x41, handler_41
        GATE_DPL 3, 3
        GATE_DPL 4, 3
        GATE_DPL 0x41, 3
        ; ---- 1. CPUID at CPL0 (an image site)
        mov eax, 1
        xor ecx, ecx
        cpuid
        mov [edx_cpl0], edx
        ; ---- 2. CPUID at CPL0 from a copy: cpuid; ret. Built with NOT so that the image holds
        ;      no 0F A2 bytes besides the two real CPUIDs.
        mov dword [copy_buf], ~0x00C3A20F
        not dword [copy_buf]
        mov eax, 1
        xor ecx, ecx
        call copy_buf
        mov [edx_copy], edx
        ; ---- 4a. UD2 at ring 0
        ud2
after_ud_ring0:
        CHECK_EQ dword [ud_count], 1, "ring0 ud2: #UD handler ran"
        CHECK_EQ dword [ud_eip], after_ud_ring0 - 2, "ring0 ud2: frame EIP = the ud2"
        CHECK_EQ dword [ud_cs], SEL_KCODE32, "ring0 ud2: frame CS = 0x08"
        ; ---- ring 3: 1 (CPUID), 3 (INT3, INTO), 4b (UD2)
        ENTER_USER user_main, rt_ustack_top
        CHECK_EQ eax, USER_EXIT, "ring3 int 0x41: returned to kernel with ring 3's EAX"
        CHECK_EQ dword [bp_count], 1, "ring3 int3: #BP handler ran once"
        CHECK_EQ dword [bp_eip], after_int3, "ring3 int3: frame EIP = after int3"
        CHECK_EQ dword [bp_cs], SEL_UCODE32, "ring3 int3: frame CS = 0x1b"
        CHECK_EQ dword [of_count], 1, "ring3 into: #OF handler ran once"
        CHECK_EQ dword [of_eip], after_into, "ring3 into: frame EIP = after into"
        CHECK_EQ dword [ud_count], 2, "ring3 ud2: #UD handler ran"
        CHECK_EQ dword [ud_eip], after_ud_ring3 - 2, "ring3 ud2: frame EIP = the ud2"
        CHECK_EQ dword [ud_cs], SEL_UCODE32, "ring3 ud2: frame CS = 0x1b"
        PRINT "guards: cpl0 leaf1 edx="
        mov eax, [edx_cpl0]
        PRINT_HEX32
        NEWLINE
        PRINT "guards: cpl3 leaf1 edx="
        mov eax, [edx_cpl3]
        PRINT_HEX32
        NEWLINE
        PRINT "guards: copy leaf1 edx="
        mov eax, [edx_copy]
        PRINT_HEX32
        NEWLINE
        ret

; ---- ring 3 (CS=0x1b, DS=SS=0x23, IF=0)
user_main:
        mov eax, 1
        xor ecx, ecx
        cpuid
        mov [edx_cpl3], edx
        int3
after_int3:
        mov eax, 0x7fffffff
        add eax, 1                      ; OF=1
        into
after_into:
        ud2
after_ud_ring3:
        mov eax, USER_EXIT
        int 0x41
        ud2                             ; never: 0x41 does not return here

; ---- ring 0 handlers (EBX = frame)
handler_bp:
        inc dword [bp_count]
        mov eax, [ebx + F32_EIP]
        mov [bp_eip], eax
        movzx eax, word [ebx + F32_CS]
        mov [bp_cs], eax
        ret
handler_of:
        inc dword [of_count]
        mov eax, [ebx + F32_EIP]
        mov [of_eip], eax
        ret
handler_ud:
        inc dword [ud_count]
        mov eax, [ebx + F32_EIP]
        mov [ud_eip], eax
        add dword [ebx + F32_EIP], 2    ; step over the ud2
        movzx eax, word [ebx + F32_CS]
        mov [ud_cs], eax
        ret
handler_41:
        mov eax, [ebx + F32_EAX]
        RETURN_TO_KERNEL

section .data
align 4
edx_cpl0:       dd 0
edx_cpl3:       dd 0
edx_copy:       dd 0
bp_count:       dd 0
bp_eip:         dd 0
bp_cs:          dd 0
of_count:       dd 0
of_eip:         dd 0
ud_count:       dd 0
ud_eip:         dd 0
ud_cs:          dd 0

section .bss
alignb 16
copy_buf:       resb 16

%include "end.inc"
