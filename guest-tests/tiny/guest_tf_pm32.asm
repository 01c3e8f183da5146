; guest_tf_pm32: the guest's own single-step (EFLAGS.TF) trap in 32-bit protected mode, ring 0
; (SDM vol. 3B 17.3.1.4: a single-step #DB is a trap taken after each instruction executed with
; TF=1; DR6.BS is set; an instruction that sets TF (POPFD here) is not itself followed by a
; trap, the trap comes after the next instruction; the #DB handler runs with TF=0 because
; delivery clears it, and its IRETD restores TF=1 from the frame).
; Sequence: POPFD sets TF, then nop, nop, mov, pushfd, and, popfd (clears TF) -> 6 traps, at the
; labels t1..t6 (the EIP after each of those instructions); none after t6. The saved EFLAGS is
; the state after the trapping instruction: TF=1 in the first 5 frames, 0 in the 6th.
; Expected: status 1, output guest_tf_pm32.expected.
%include "rt.inc"

main:
        SET_HANDLER 1, db_handler
        pushfd
        or dword [esp], 0x100
        popfd                           ; TF=1 from the next instruction on: no trap after POPFD
        nop
t1:     nop
t2:     mov eax, 1
t3:     pushfd
t4:     and dword [esp], ~0x100
t5:     popfd                           ; TF was 1 when POPFD started: one more trap, after it
t6:     nop
        nop
        CHECK_EQ dword [db_count], 6, "single-step #DBs: 6 (after nop, nop, mov, pushfd, and, popfd)"
        CHECK_EQ dword [db_eips + 0], t1, "trap 1 after the first nop"
        CHECK_EQ dword [db_eips + 4], t2, "trap 2 after the second nop"
        CHECK_EQ dword [db_eips + 8], t3, "trap 3 after mov"
        CHECK_EQ dword [db_eips + 12], t4, "trap 4 after pushfd"
        CHECK_EQ dword [db_eips + 16], t5, "trap 5 after and"
        CHECK_EQ dword [db_eips + 20], t6, "trap 6 after the popfd that clears TF"
        CHECK_EQ dword [db_bs], 6, "DR6.BS set at every trap"
        CHECK_EQ dword [db_tf_in_handler], 0, "handler runs with TF=0"
        CHECK_EQ dword [db_tf_in_frame], 5, "frame EFLAGS has TF=1 at traps 1-5 (the 6th follows the POPFD that cleared it)"
        ret

; ebx = frame (idt32.inc): record the trap (db_record.inc) and whether TF was set in the
; handler and in the frame.
db_handler:
        call db_record
        pushfd
        pop eax
        and eax, 0x100
        or [db_tf_in_handler], eax
        test dword [ebx + F32_EFLAGS], 0x100
        jz .ret
        inc dword [db_tf_in_frame]
.ret:
        ret

%include "db_record.inc"

section .data
align 4
db_tf_in_handler: dd 0
db_tf_in_frame:   dd 0

%include "end.inc"
