; modules_pm32: Multiboot modules as `vbts run --initrd` and `qemu -initrd` load them for a
; Multiboot kernel (docs/guest-abi.md, "Modules"). tests.cfg passes two modules,
; "module_env.txt NR_CPUS=9 x" and "module_two.txt". The image checks flags bit 3, mods_count = 2,
; each mod_start page-aligned and mod_end - mod_start = the file's size (24 and 14 bytes), and
; prints each module's command line after its last '/' (the directory is the checkout's) and its
; bytes. Expected: status 1, the lines in tests.cfg, under vbts and QEMU TCG alike.
%include "rt.inc"

main:
        mov ebx, [rt_mb_info]
        mov eax, [ebx + MBI_FLAGS]
        and eax, 1 << 3
        CHECK_EQ eax, 1 << 3, "flags: MODS"
        mov ebx, [rt_mb_info]
        CHECK_EQ dword [ebx + 20], 2, "mods_count = 2"
        mov ebx, [rt_mb_info]
        mov esi, [ebx + 24]                     ; the module table
        mov [mods], esi
        xor edi, edi
.each:
        mov esi, [mods]
        mov eax, edi
        shl eax, 4
        add esi, eax                            ; &mods[i]
        mov eax, [esi]
        and eax, 0xFFF
        CHECK_EQ eax, 0, "mod_start page-aligned"
        mov esi, [mods]
        mov eax, edi
        shl eax, 4
        add esi, eax
        mov eax, [esi + 4]
        sub eax, [esi]
        CHECK_EQ eax, dword [sizes + edi * 4], "mod_end - mod_start = file size"
        PRINT "module "
        mov eax, edi
        PRINT_DEC
        PRINT ": cmdline="
        mov esi, [mods]
        mov eax, edi
        shl eax, 4
        add esi, eax
        mov esi, [esi + 8]                      ; the command line
        mov ebx, esi
.last_slash:
        mov al, [esi]
        test al, al
        jz .found
        inc esi
        cmp al, '/'
        jne .last_slash
        mov ebx, esi
        jmp .last_slash
.found:
        mov esi, ebx
        call rt_puts32
        NEWLINE
        PRINT "module "
        mov eax, edi
        PRINT_DEC
        PRINT ": "
        mov esi, [mods]
        mov eax, edi
        shl eax, 4
        add esi, eax
        mov ecx, [esi + 4]
        mov esi, [esi]
.byte:
        cmp esi, ecx
        jae .next
        mov al, [esi]
        call rt_putc32
        inc esi
        jmp .byte
.next:
        inc edi
        cmp edi, 2
        jb .each
        ret

section .data
align 4
mods:   dd 0
sizes:  dd 24, 14
%include "end.inc"
