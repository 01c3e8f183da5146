; spin: an endless `jmp $` for --timeout. Expected: vbts --timeout status 124; QEMU ended by
; the runner's timeout (124). Output: spin.expected.
%include "rt.inc"

main:
        PRINTLN "spin: jmp $ forever"
.forever:
        jmp .forever

%include "end.inc"
