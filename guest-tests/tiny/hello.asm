; hello: the smallest image. Prints a greeting, checks what the loader handed over, exits 0.
; Built twice: hello.elf (ELF32) and hello_aout.bin (nasm -f bin, Multiboot a.out kludge).
; Expected output: tiny/hello.expected; status 1 (exit value 0).
%include "rt.inc"

main:
        PRINTLN "Hello from vbts guest"
        ; Multiboot: EAX at entry was 0x2BADB002 (spec, "Machine state").
        CHECK_EQ dword [rt_mb_magic], MB_BOOT_MAGIC, "multiboot magic in eax"
        ; Our header is the first thing in the image, linked/org'ed at 0x100000.
        CHECK_EQ dword [RT_LOAD_ADDR], MB_MAGIC, "image loaded at 1 MiB"
        ; The loader must zero .bss (ELF: p_memsz > p_filesz; a.out: load_end..bss_end).
        CHECK_EQ dword [rt_bss_dirty], 0, "bss zeroed by loader"
        ; Info flags bit 0: mem_lower/mem_upper valid (we asked with header flag 1).
        mov ebx, [rt_mb_info]
        mov eax, [ebx + MBI_FLAGS]
        and eax, 1
        CHECK_EQ eax, 1, "multiboot info has memory fields"
        ; 128 MiB of RAM from 0: mem_upper <= (128 MiB - 1 MiB) / 1 KiB = 130048 KiB. Firmware
        ; may keep some top memory (QEMU+SeaBIOS report 129920), so accept 64 MiB .. 127 MiB.
        mov eax, [ebx + MBI_MEM_UPPER]
        sub eax, 65536
        cmp eax, 130048 - 65536
        CHECK_CC be, "mem_upper for 128 MiB"
        ret

%include "end.inc"
