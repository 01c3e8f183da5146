; exp14_11: book experiment 14-11, CPL-qualified BTS from ring 3 (SDM vol. 3B 17.4.9.4, table
; 17-6: with DEBUGCTL.BTS_OFF_OS, branches whose target is in ring 0 are not stored).
; Ring 3 asks the kernel through the system-service interrupt INT 0x40 (DPL 3 gate):
;   EAX=1: enable BTS (TR|BTS|BTS_OFF_OS, circular 16-record buffer), EAX=2: a null service,
;   EAX=3: disable BTS. Ring 3 then leaves with INT 0x41 (back to the kernel).
; Derivation: after the enable service, every ring-0 branch (the handler's RET, the INT 0x40
; from ring 3, the stub's JMP, CALL and RET) targets ring 0 and is dropped; the IRETs back to
; ring 3 target ring 3 and are stored. Between enabling and disabling ring 3 executes no branch
; except the INTs. So exactly 2 records: (rt_isr_iret32 -> after_enable) and
; (rt_isr_iret32 -> after_null); the INT 0x40 of the disable service is not stored.
; Expected: status 1 under vbts; QEMU TCG: SKIP, status 155.
%include "rt.inc"
%include "debug32.inc"

%define NREC 16

main:
        BTS_REQUIRE
        mov eax, 1
        call dbg_cpuid32
        test ecx, 1 << 4                ; DS-CPL
        jnz .cpl_ok
        SKIP "CPUID.1:ECX.DS-CPL clear: no CPL-qualified BTS"
        ret
.cpl_ok:
        SET_HANDLER 0x40, svc_handler
        SET_HANDLER 0x41, exit_handler
        GATE_DPL 0x40, 3
        GATE_DPL 0x41, 3
        mov eax, bts_buffer
        mov ecx, NREC
        mov edx, NREC
        call dbg_ds_init32
        ENTER_USER user_main, rt_ustack_top
        mov ecx, NREC
        call dbg_dump_bts32
        mov eax, 1
        call dbg_ds_field32
        mov edx, [dbg_rec]
        lea edx, [bts_buffer + edx * 2]
        CHECK_EQ eax, edx, "2 records stored (index = base + 2 records)"
        mov eax, 0
        xor edx, edx
        call dbg_bts_field32
        CHECK_EQ eax, rt_isr_iret32, "record 0: from the kernel's IRET"
        mov eax, 0
        mov edx, 1
        call dbg_bts_field32
        CHECK_EQ eax, after_enable, "record 0: to ring 3 after the enable service"
        mov eax, 1
        xor edx, edx
        call dbg_bts_field32
        CHECK_EQ eax, rt_isr_iret32, "record 1: from the kernel's IRET"
        mov eax, 1
        mov edx, 1
        call dbg_bts_field32
        CHECK_EQ eax, after_null, "record 1: to ring 3 after the null service"
        ret

; ring 3
user_main:
        mov eax, 1
        int 0x40
after_enable:
        mov eax, 2
        int 0x40
after_null:
        mov eax, 3
        int 0x40
        int 0x41

; ring 0, ebx = frame
svc_handler:
        mov eax, [ebx + F32_EAX]
        cmp eax, 1
        je .enable
        cmp eax, 3
        je .disable
        ret
.enable:
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS | DBG_BTS_OFF_OS
        ret
.disable:
        WRMSR32 MSR_DEBUGCTL, 0
        ret

exit_handler:
        xor eax, eax
        RETURN_TO_KERNEL

section .bss
alignb 64
bts_buffer:     resb 24 * NREC

%include "end.inc"
