; guest_tf_movss_pm32: the guest's own single-step (EFLAGS.TF) traps across MOV SS and POP SS, in
; 32-bit protected mode, ring 0. An instruction that loads SS inhibits debug exceptions (the
; single-step trap included) until the next instruction has run (SDM vol. 3A 6.8.3): the trap
; after MOV SS/POP SS is not taken there; one #DB (DR6.BS) follows the instruction in its
; shadow. kvm-unit-tests debug.flat asserts the same ("Single-step #DB w/ MOVSS blocking").
; Sequence (TF=1 from after the POPFD on):
;   mov ss, ax        no trap (shadow)
;   mov ecx, 1        trap 1, EIP = t1 (one #DB for both instructions)
;   t1: push ss       trap 2, EIP = t2
;   t2: pop ss        no trap (shadow)
;   mov ecx, 2        trap 3, EIP = t3
;   t3: pushfd        trap 4, EIP = t4
;   t4: and [esp]     trap 5, EIP = t5
;   t5: popfd (TF=0)  trap 6, EIP = t6 (TF was 1 when it started)
; 6 traps in all, each with DR6.BS. Until 2026-11-26 vbts raised a trap right after MOV SS and
; POP SS whenever it traced the guest (vbts record, --branches, the guest label's kvm-tcg switch):
; 8 traps, the first at the MOV ECX, 1.
; This host's KVM itself raises the trap right after MOV SS/POP SS in 32-bit code (docs/completion.md,
; "The #DB guard"), so tests.cfg runs the image traced on the TCG engine.
; Expected: status 1, output guest_tf_movss_pm32.expected.
%include "rt.inc"

main:
        SET_HANDLER 1, db_handler
        mov ax, ss
        pushfd
        or dword [esp], 0x100
        popfd                           ; TF=1 from the next instruction on
        mov ss, ax                      ; its trap is held by the MOV SS shadow
        mov ecx, 1
t1:     push ss
t2:     pop ss                          ; its trap is held by the POP SS shadow
        mov ecx, 2
t3:     pushfd
t4:     and dword [esp], ~0x100
t5:     popfd                           ; clears TF; TF was 1 when it started: one more trap
t6:     nop
        nop
        CHECK_EQ dword [db_count], 6, "single-step #DBs: 6 (none right after MOV SS or POP SS)"
        CHECK_EQ dword [db_eips + 0], t1, "trap 1 after the instruction in MOV SS's shadow"
        CHECK_EQ dword [db_eips + 4], t2, "trap 2 after push ss"
        CHECK_EQ dword [db_eips + 8], t3, "trap 3 after the instruction in POP SS's shadow"
        CHECK_EQ dword [db_eips + 12], t4, "trap 4 after pushfd"
        CHECK_EQ dword [db_eips + 16], t5, "trap 5 after and"
        CHECK_EQ dword [db_eips + 20], t6, "trap 6 after the popfd that clears TF"
        CHECK_EQ dword [db_bs], 6, "DR6.BS set at every trap"
        ret

db_handler:
        jmp db_record

%include "db_record.inc"
%include "end.inc"
