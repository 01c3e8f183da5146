; halt_cli: cli; hlt with nothing that can wake the CPU (no NMI source, IF=0).
; Expected: vbts status 122 (halted with interrupts disabled); QEMU sits forever, so the
; runner's timeout ends it (status 124). Output: halt_cli.expected.
%include "rt.inc"

main:
        PRINTLN "halt_cli: cli; hlt"
        cli
        hlt
        FAIL "halt_cli: woke up from hlt with IF=0"
        EXIT EXIT_FAIL

%include "end.inc"
