; exp14_12: book experiment 14-12, 64-bit BTS through a high canonical address (SDM vol. 3B
; 17.4.9.2: in IA-32e mode the DS save area and the BTS records use 64-bit fields).
; main (identity-mapped, 64-bit ring 0) turns BTS on (circular, 16 records), calls fn through
; the alias RT_ALIAS (0xFFFFFFF8_10000000 + offset from 1 MiB), fn makes six jumps and returns,
; then main turns BTS off. Exactly 8 records, derived from the labels (A(x) = alias of x):
;   0: call    (call_site -> A(fn))
;   1..6: jumps (A(fjk) -> A(fjk+1)), k = 0..5 (fj0 = fn)
;   7: return  (A(fj6) -> back, the instruction after the call)
; Expected: status 1 under vbts; QEMU TCG: SKIP, status 155.
%define RT_LONG_MODE 1
%include "rt.inc"
%include "debug64.inc"

%define NREC 16
%define ALIAS(x) ((x) - RT_LOAD_ADDR)   ; offset; the code adds RT_ALIAS at run time

main:
        BTS_REQUIRE64
        mov rdi, bts_buffer             ; circular, threshold = max
        mov ecx, NREC
        mov edx, NREC
        call dbg64_ds_init
        mov rbx, RT_ALIAS
        mov rsi, ALIAS(fn)
        add rsi, rbx                    ; rsi = A(fn)
        WRMSR64 MSR_DEBUGCTL, DBG_TR | DBG_BTS
call_site:
        call rsi
after_call:
        WRMSR64 MSR_DEBUGCTL, 0
        mov ecx, 8
        call dbg64_dump_bts
        ; checks
        mov rax, bts_buffer + 8 * 24
        CHECK_EQ qword [dbg64_ds_area + 8], rax, "8 records (index = base + 8 records)"
        CHECK_EQ qword [bts_buffer + 0], call_site, "record 0: from = call_site"
        mov rax, ALIAS(fn)
        add rax, rbx
        CHECK_EQ qword [bts_buffer + 8], rax, "record 0: to = 0xfffffff8_1xxxxxxx alias of fn"
        ; jumps: fj0..fj6 are 2 bytes apart (EB 00)
        xor r12d, r12d
.jumps:
        imul rdi, r12, 24
        lea rax, [rbx + ALIAS(fn) + r12 * 2]
        cmp [bts_buffer + 24 + rdi], rax
        jne .bad
        lea rax, [rbx + ALIAS(fn) + 2 + r12 * 2]
        cmp [bts_buffer + 24 + rdi + 8], rax
        jne .bad
        inc r12d
        cmp r12d, 6
        jb .jumps
        PASS "records 1-6: the six jumps at their 64-bit alias addresses"
        jmp .ret_check
.bad:
        FAIL "records 1-6: the six jumps at their 64-bit alias addresses"
.ret_check:
        mov rax, ALIAS(fj6)
        add rax, rbx
        CHECK_EQ qword [bts_buffer + 7 * 24], rax, "record 7: from = alias of the ret"
        CHECK_EQ qword [bts_buffer + 7 * 24 + 8], after_call, "record 7: to = after_call"
        ret

; Runs at its alias address.
fn:
fj0:    jmp fj1
fj1:    jmp fj2
fj2:    jmp fj3
fj3:    jmp fj4
fj4:    jmp fj5
fj5:    jmp fj6
fj6:    ret

section .bss
alignb 64
bts_buffer:     resb 24 * NREC

%include "end.inc"
