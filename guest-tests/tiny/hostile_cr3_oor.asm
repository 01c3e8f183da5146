; hostile_cr3_oor: CR3 beyond the end of RAM (0xF0000000: nothing there) under 32-bit paging with
; 4 KiB pages (CR4.PSE clear), with BTS recording into a buffer that the old tables mapped.
; This host's KVM cannot run 32-bit paging: tests.cfg runs the image with --engine=tcg.
;
; Paging is turned on with `pd`/`pt` mapping 0..4 MiB 1:1 and BTS on (when the CPU has it); then
; MOV CR3 loads 0xF0000000. The fetch of the next instruction walks from there: every entry is
; read from memory that is not there. On vbts that reads all ones (an empty PC bus, docs/guest-abi.md):
; the PDE is present, its page table at 0xFFFFF000, whose PTE is all ones too: the code page is
; physical 0xFFFFF000, whose bytes read 0xFF: FF FF is not an instruction (FF /7), #UD; its gate is
; read through the same tables (all ones: a trap gate whose selector 0xFFFF is beyond the GDT
; limit), #GP, then #DF, then shutdown (SDM 6.15): status 120 and one stderr line. No delivery
; completes, so BTS stores nothing more; the tracer, which reads back the instruction it saw (the
; MOV CR3) through the paging in force, cannot read it through the new tables: one vbts warning.
; Before vbts's fix the TCG engine mapped the code page to an unassigned one that reads 0 and ran
; its zeros (ADD [EAX], AL) until --timeout (and without --timeout for ever).
; QEMU (unbacked memory reads 0: PDE not present, #PF, #DF, shutdown; -no-reboot): status 0.
%include "rt.inc"
%include "debug32.inc"

main:
        ; pt maps 0..4 MiB 1:1 with 4 KiB pages (P W)
        mov edi, pt
        mov eax, 3
.fill:  mov [edi], eax
        add edi, 4
        add eax, 0x1000
        cmp edi, pt + 4096
        jne .fill
        mov eax, pt
        or eax, 3
        mov [pd], eax
        mov eax, pd
        mov cr3, eax
        mov eax, cr0
        or eax, 1 << 31
        mov cr0, eax
        jmp .paged
.paged:
        call dbg_probe32
        jc .go                                       ; no BTS (QEMU): the walk alone
        cmp dword [dbg_fmt64], 1
        jne .go
        mov dword [dsa + 0x00], bts_buf              ; base (64-bit DS format, upper dwords 0)
        mov dword [dsa + 0x08], bts_buf              ; index
        mov dword [dsa + 0x10], bts_buf + 8 * 24     ; maximum: circular, 8 records
        mov dword [dsa + 0x18], bts_buf + 8 * 24     ; threshold
        WRMSR32 MSR_DS_AREA, dsa
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS
.go:
        PRINTLN "CR3 at 0xF0000000, then the next instruction"
        mov eax, 0xF0000000
        mov cr3, eax
        PRINTLN "FAIL: ran on after CR3 left RAM"
        ret

section .data
align 64
dsa:            times 0x40 db 0
align 64
bts_buf:        times 8 * 24 db 0
align 4096
pd:             times 1024 dd 0
pt:             times 1024 dd 0

%include "end.inc"
