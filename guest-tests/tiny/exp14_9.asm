; exp14_9: book experiment 14-9, circular BTS (SDM vol. 3B 17.4.5, 17.4.9).
; A 10-record BTS buffer in circular mode (DEBUGCTL.TR|BTS, BTINT=0), then 11 jumps (jump k goes
; from label jk-1... written j0..j10 -> j1..j11). Records 0-9 receive jumps 1-10; the 10th
; record brings the index to the absolute maximum, so it returns to base (circular mode), and
; jump 11 (j10 -> j11) overwrites record 0. Expected, all derived from the labels:
;   index = base + 1 record; record 0 = (j10, j11); record k = (jk, jk+1) for k = 1..9.
; The WRMSR that turns BTS off after j11 is no branch: nothing else is recorded.
; Expected: status 1 (exit 0) under vbts; under QEMU TCG (no DS) status 155 (exit 77, SKIP).
%include "rt.inc"
%include "debug32.inc"

%define NREC 10

main:
        BTS_REQUIRE
        mov eax, bts_buffer
        mov ecx, NREC
        mov edx, NREC                   ; threshold = maximum: no interrupt in circular mode
        call dbg_ds_init32
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS
j0:     jmp j1
j1:     jmp j2
j2:     jmp j3
j3:     jmp j4
j4:     jmp j5
j5:     jmp j6
j6:     jmp j7
j7:     jmp j8
j8:     jmp j9
j9:     jmp j10
j10:    jmp j11
j11:    WRMSR32 MSR_DEBUGCTL, 0
        mov ecx, NREC
        call dbg_dump_bts32
        mov eax, 1
        call dbg_ds_field32
        mov edx, [dbg_rec]
        add edx, bts_buffer
        CHECK_EQ eax, edx, "index = base + 1 record (wrapped once)"
        mov eax, 0
        xor edx, edx
        call dbg_bts_field32
        CHECK_EQ eax, j10, "record 0: from = j10 (jump 11 overwrote it)"
        mov eax, 0
        mov edx, 1
        call dbg_bts_field32
        CHECK_EQ eax, j11, "record 0: to = j11"
        ; records 1..9: jump k+1 = (jk, jk+1); the jumps are 2 bytes apart (EB rel8)
        mov ebx, 1
.check:
        mov eax, ebx
        xor edx, edx
        call dbg_bts_field32
        lea ecx, [j0 + ebx * 2]
        cmp eax, ecx
        jne .bad
        mov eax, ebx
        mov edx, 1
        call dbg_bts_field32
        lea ecx, [j1 + ebx * 2]
        cmp eax, ecx
        jne .bad
        mov eax, ebx
        mov edx, 2
        call dbg_bts_field32
        test eax, eax
        jnz .bad
        inc ebx
        cmp ebx, NREC
        jb .check
        PASS "records 1-9 = jumps 2-10 (jk -> jk+1), flags 0"
        ret
.bad:
        FAIL "records 1-9 = jumps 2-10 (jk -> jk+1), flags 0"
        ret

section .bss
alignb 64
bts_buffer:     resb 24 * NREC

%include "end.inc"
