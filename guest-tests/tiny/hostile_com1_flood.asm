; hostile_com1_flood: a guest that floods COM1 with 2 MiB (32 blocks of 65536 bytes, REP OUTSB
; to THR without polling LSR: vbts's UART is always ready), then exits 0. vbts writes every byte
; to its output as it comes (docs/cli.md) and buffers none of it: its memory stays bounded
; whatever the guest writes, and the guest waits while the reader is slow. The ctest
; `hostile.com1_flood_bounded` (scripts/hostile-resources.py) counts the bytes through a pipe and
; checks vbts's peak RSS; with output nobody reads, --timeout still ends the run (124).
; Expected: status 1; stdout: "flood: start", 2 MiB of '.' and newlines, "flood: done".
%include "rt.inc"

%define BLOCKS 32

main:
        PRINTLN "flood: start"
        mov ebx, BLOCKS
.block:
        mov esi, block
        mov ecx, BLOCK_LEN
        mov dx, COM1
        rep outsb
        dec ebx
        jnz .block
        NEWLINE
        PRINTLN "flood: done"
        ret

section .data
block:
%rep 1024
        times 63 db '.'
        db 10
%endrep
BLOCK_LEN equ $ - block

%include "end.inc"
