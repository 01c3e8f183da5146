; hostile_exit_port: the debug-exit port 0xF4 written again and again. The first write ends the
; VM with (v << 1) | 1 (docs/guest-abi.md, QEMU's isa-debug-exit); nothing after it runs.
;  - one REP OUTSD of 64 dwords 3, 5, 7, ...: a single KVM exit carries all of them; only the
;    first counts: status (3 << 1) | 1 = 7;
;  - should that return (it must not), a loop of 100 000 single writes of 9 (status 19) and a
;    FAIL line follow.
; Expected: status 7 under vbts and QEMU; stdout only the line before the writes.
%include "rt.inc"

main:
        PRINTLN "writing the exit port"
        mov esi, values
        mov ecx, 64
        mov dx, DEBUG_EXIT_PORT
        rep outsd
        mov ecx, 100000
.again:
        mov eax, 9
        out dx, eax
        dec ecx
        jnz .again
        PRINTLN "FAIL: the exit port did not end the VM"
        ret

section .data
align 4
values:
%assign v 3
%rep 64
        dd v
%assign v v + 2
%endrep

%include "end.inc"
