; hostile_mem: RAM at the edges of --mem (docs/cli.md: 2 MiB to 3 GiB). Prints the RAM size the
; Multiboot info reports (1 MiB + mem_upper KiB, vbts's exact size) and writes and reads back the
; last dword of RAM. tests.cfg runs it with --mem=2M and --mem=3G (and with values just outside
; the range, which vbts refuses before the guest runs: status 116, one line naming --mem).
; Expected: status 1, "RAM: N KiB" and two PASS lines.
%include "rt.inc"

main:
        mov ebx, [rt_mb_info]
        mov eax, [ebx + MBI_MEM_UPPER]
        add eax, 1024
        PRINT "RAM: "
        PRINT_DEC
        PRINTLN " KiB"
        shl eax, 10                     ; the end of RAM (below 4 GiB: at most 3 GiB)
        lea edi, [eax - 4]
        mov dword [edi], 0x600dcafe
        CHECK_EQ dword [edi], 0x600dcafe, "the last dword of RAM holds what was written"
        cmp edi, rt_bss_end
        CHECK_CC a, "the end of RAM lies above the image"
        ret

%include "end.inc"
