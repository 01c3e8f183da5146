; bts_diff_pm32: a branchy 32-bit workload traced by BTS, for the differential test against
; QEMU TCG (scripts/diff-qemu-bts.py, docs/tracing.md): loops, recursion, a jump table
; (indirect JMP through memory), indirect CALLs through a register and memory, conditional
; branches both ways. Between wl_start and wl_end BTS records every taken branch into a
; circular buffer big enough for all of them; afterwards the image prints each record as
; "BTS 0x<from> 0x<to>" (the window: from the CALL at wl_call to the return at wl_back; the
; not-taken JE after it is not recorded). Under QEMU (no DS) the workload runs the same, unrecorded, and the
; image SKIPs; the script derives the taken branches from QEMU's executed-instruction stream
; and the instruction lengths objdump reports, and compares.
%include "rt.inc"
%include "debug32.inc"

%define NREC 2048

main:
        call dbg_probe32
        setnc byte [have_bts]
        jc .no_setup
        mov eax, bts_buffer
        mov ecx, NREC
        mov edx, NREC
        call dbg_ds_init32
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS
.no_setup:
wl_call:
        call workload
wl_back:
        cmp byte [have_bts], 0
        je no_bts                       ; not taken with BTS on: nothing recorded after wl_back
        WRMSR32 MSR_DEBUGCTL, 0
        mov eax, 1
        call dbg_ds_field32
        sub eax, [dbg_base]
        xor edx, edx
        div dword [dbg_rec]
        mov esi, eax                    ; records
        xor ebx, ebx
.rec:
        cmp ebx, esi
        jae .done
        PRINT "BTS "
        mov eax, ebx
        xor edx, edx
        call dbg_bts_field32
        PRINT_HEX32
        PRINT " "
        mov eax, ebx
        mov edx, 1
        call dbg_bts_field32
        PRINT_HEX32
        NEWLINE
        inc ebx
        jmp .rec
.done:
        PASS "workload recorded"
        ret
no_bts:
        SKIP "BTS: no debug store here (the workload ran unrecorded)"
        ret

; ---- the workload: wl_start .. wl_end (called with BTS on)
workload:
wl_start:
        push ebx
        push esi
        ; loop with a conditional inside
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
        ; recursion: fib(6)
        mov eax, 6
        call fib
        ; jump table
        xor esi, esi
wl_jt:
        mov ebx, esi
        and ebx, 3
        jmp [jtab + ebx * 4]
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
        ; indirect calls
        mov ebx, leaf
        call ebx
        call [leaf_ptr]
        pop esi
        pop ebx
wl_end:
        ret

fib:                                    ; eax = n -> eax = fib(n), recursive
        cmp eax, 2
        jb .base
        push eax
        dec eax
        call fib
        xchg eax, [esp]
        sub eax, 2
        call fib
        pop edx
        add eax, edx
.base:
        ret

leaf:
        inc eax
        ret

section .data
align 4
jtab:           dd jt0, jt1, jt2, jt3
leaf_ptr:       dd leaf
have_bts:       db 0

section .bss
alignb 64
bts_buffer:     resb 24 * NREC

%include "end.inc"
