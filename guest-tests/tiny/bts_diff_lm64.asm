; bts_diff_lm64: the bts_diff_pm32 workload in 64-bit long mode, plus a CALL through the high
; canonical alias (RT_ALIAS), for the differential test against QEMU TCG
; (scripts/diff-qemu-bts.py --mode 64). BTS (64-bit DS format) records every taken branch from
; the CALL at wl_call to the return at wl_back; the image prints them as "BTS 0x<from> 0x<to>".
%define RT_LONG_MODE 1
%include "rt.inc"
%include "debug64.inc"

%define NREC 2048

main:
        call dbg64_probe
        jc no_bts_setup
        mov byte [have_bts], 1
        mov rdi, bts_buffer             ; circular, big enough for the whole workload
        mov ecx, NREC
        mov edx, NREC
        call dbg64_ds_init
        WRMSR64 MSR_DEBUGCTL, DBG_TR | DBG_BTS
no_bts_setup:
        mov r12, RT_ALIAS - RT_LOAD_ADDR
wl_call:
        call workload
wl_back:
        cmp byte [have_bts], 0
        je no_bts                       ; not taken with BTS on
        WRMSR64 MSR_DEBUGCTL, 0
        mov rbx, bts_buffer
.rec:
        cmp rbx, [dbg64_ds_area + 8]
        jae .done
        PRINT "BTS "
        mov rax, [rbx]
        PRINT_HEX64
        PRINT " "
        mov rax, [rbx + 8]
        PRINT_HEX64
        NEWLINE
        add rbx, 24
        jmp .rec
.done:
        PASS "workload recorded"
        ret
no_bts:
        SKIP "BTS: no debug store here (the workload ran unrecorded)"
        ret

workload:
        push rbx
        push rsi
        mov ecx, 5
.loop:
        test ecx, 1
        jz .even
        add eax, ecx
        jmp .next
.even:
        sub eax, ecx
.next:
        loop .loop
        mov eax, 6
        call fib
        xor esi, esi
wl_jt:
        mov ebx, esi
        and ebx, 3
        jmp [jtab + rbx * 8]
jt0:    add eax, 1
        jmp wl_jt_next
jt1:    add eax, 2
        jmp wl_jt_next
jt2:    add eax, 3
        jmp wl_jt_next
jt3:    add eax, 4
wl_jt_next:
        inc esi
        cmp esi, 6
        jb wl_jt
        mov rbx, leaf
        call rbx
        call [leaf_ptr]
        lea rbx, [leaf + r12]           ; the same leaf through the high alias
        call rbx
        pop rsi
        pop rbx
        ret

fib:
        cmp eax, 2
        jb .base
        push rax
        dec eax
        call fib
        xchg rax, [rsp]
        sub eax, 2
        call fib
        pop rdx
        add eax, edx
.base:
        ret

leaf:
        inc eax
        ret

section .data
align 8
jtab:           dq jt0, jt1, jt2, jt3
leaf_ptr:       dq leaf
have_bts:       db 0

section .bss
alignb 64
bts_buffer:     resb 24 * NREC

%include "end.inc"
