; triple_fault: load an IDT with limit 0, then ud2. #UD (vector 6) is outside the IDT -> #GP,
; also outside -> #DF, also outside -> triple fault -> shutdown. Nothing after the first line
; may appear and the exit port is never written.
; Expected: vbts status 120 (shutdown); QEMU with -no-reboot exits 0. Output: triple_fault.expected.
%include "rt.inc"

main:
        PRINTLN "triple_fault: lidt limit 0, then ud2"
        lidt [empty_idt]
        ud2
        FAIL "triple_fault: execution continued after ud2"
        EXIT EXIT_FAIL

section .data
align 8
empty_idt:
        dw 0                            ; limit 0: no vector is inside
        dd 0

%include "end.inc"
