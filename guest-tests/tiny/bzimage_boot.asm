; bzimage_boot: a bzImage with no real-mode code, only Linux's setup header (boot protocol 2.15,
; Documentation/arch/x86/boot.rst) and a protected-mode part that checks the state of Linux's
; 32-bit boot protocol as vbts enters it (docs/guest-abi.md, "Linux bzImage kernels"):
;   - entered at code32_start (0x100000) with CS = __BOOT_CS (0x10), DS/ES/SS = __BOOT_DS (0x18),
;     EBX = EBP = EDI = 0 (boot.rst: "%ebp, %edi and %ebx must be zero");
;   - ESI = boot_params at 0x9000 (vbts's boot-information page) holding this file's setup header
;     ("HdrS", version 0x020F) with type_of_loader 0xFF (undefined) and code32_start 1 MiB;
;   - cmd_line_ptr: the --append text (tests.cfg: bzimage=1), NUL-terminated;
;   - the E820 map of a 128 MiB guest: [0, 0xA0000) usable, [0xA0000, 1 MiB) reserved,
;     [1 MiB, 128 MiB) usable (the same map PVH and Multiboot guests get);
;   - the initrd (tests.cfg: tiny/bzimage_initrd.txt, "vbts initrd\n", 12 bytes) at the top of RAM,
;     page-aligned: (0x8000000 - 12) & ~0xFFF = 0x7FFF000 (below initrd_addr_max 0x7FFFFFFF);
;   - acpi_rsdp_addr (protocol 2.14+) = 0xF0000, where "RSD PTR " is.
; No rt.inc: its Multiboot header and runtime are not a bzImage's. Output to COM1 by polling;
; exit through isa-debug-exit (0xF4): 0 if every check passed (status 1), else 1 (status 3).
; QEMU enters a bzImage through its real-mode setup code, which this file does not have: qemu = no.

SETUP_SECTS     equ 1
BPARAMS              equ 0x9000                  ; where vbts puts boot_params for this image
RAM_END         equ 0x8000000               ; --mem default, 128 MiB
INITRD_SIZE     equ 12

        section .setup start=0
        bits 16
        times 0x1F1 - ($ - $$) db 0
        db SETUP_SECTS                      ; 0x1F1 setup_sects
        dw 0                                ; 0x1F2 root_flags
        dd 0                                ; 0x1F4 syssize
        dw 0                                ; 0x1F8 ram_size
        dw 0                                ; 0x1FA vid_mode
        dw 0                                ; 0x1FC root_dev
        dw 0xAA55                           ; 0x1FE boot_flag
        db 0xEB, hdr_end - 0x202            ; 0x200 jump; the byte at 0x201 marks the header's end
        db "HdrS"                           ; 0x202 header
        dw 0x020F                           ; 0x206 version 2.15
        dd 0                                ; 0x208 realmode_swtch
        dw 0                                ; 0x20C start_sys_seg
        dw 0                                ; 0x20E kernel_version
        db 0                                ; 0x210 type_of_loader (the boot loader's)
        db 1                                ; 0x211 loadflags: LOADED_HIGH
        dw 0                                ; 0x212 setup_move_size
        dd 0x100000                         ; 0x214 code32_start
        dd 0                                ; 0x218 ramdisk_image (the boot loader's)
        dd 0                                ; 0x21C ramdisk_size (the boot loader's)
        dd 0                                ; 0x220 bootsect_kludge
        dw 0                                ; 0x224 heap_end_ptr
        db 0                                ; 0x226 ext_loader_ver
        db 0                                ; 0x227 ext_loader_type
        dd 0                                ; 0x228 cmd_line_ptr (the boot loader's)
        dd 0x7FFFFFFF                       ; 0x22C initrd_addr_max
        dd 0x200000                         ; 0x230 kernel_alignment
        db 0                                ; 0x234 relocatable_kernel: runs where it is loaded
        db 0                                ; 0x235 min_alignment
        dw 0                                ; 0x236 xloadflags
        dd 255                              ; 0x238 cmdline_size
        dd 0                                ; 0x23C hardware_subarch
        dq 0                                ; 0x240 hardware_subarch_data
        dd 0                                ; 0x248 payload_offset
        dd 0                                ; 0x24C payload_length
        dq 0                                ; 0x250 setup_data
        dq 0x100000                         ; 0x258 pref_address
        dd 0x100000                         ; 0x260 init_size: runs in [1 MiB, 2 MiB)
        dd 0                                ; 0x264 handover_offset
        dd 0                                ; 0x268 kernel_info_offset
hdr_end:
        times (SETUP_SECTS + 1) * 512 - ($ - $$) db 0

        section .pm follows=.setup vstart=0x100000
        bits 32
start32:
        mov [entry_esi], esi
        mov [entry_ebx], ebx
        mov [entry_ebp], ebp
        mov [entry_edi], edi
        mov ax, cs
        mov [entry_cs], ax
        mov ax, ds
        mov [entry_ds], ax
        mov ax, es
        mov [entry_es], ax
        mov ax, ss
        mov [entry_ss], ax
        call .here
.here:  pop eax
        sub eax, .here - start32
        mov [entry_eip], eax
        mov esp, stack_top

        ; 1. entry point and selectors
        cmp dword [entry_eip], 0x100000
        jne .f1
        cmp word [entry_cs], 0x10
        jne .f1
        cmp word [entry_ds], 0x18
        jne .f1
        cmp word [entry_es], 0x18
        jne .f1
        cmp word [entry_ss], 0x18
.f1:    mov esi, msg_entry
        call check

        ; 2. EBX, EBP, EDI zero
        mov eax, [entry_ebx]
        or eax, [entry_ebp]
        or eax, [entry_edi]
        mov esi, msg_zero
        call check

        ; 3. ESI: boot_params with the setup header
        mov ebx, [entry_esi]
        cmp ebx, BPARAMS
        jne .f3
        cmp dword [ebx + 0x202], 0x53726448  ; "HdrS"
        jne .f3
        cmp word [ebx + 0x206], 0x020F
        jne .f3
        cmp byte [ebx + 0x1F1], SETUP_SECTS
.f3:    mov esi, msg_params
        call check

        ; 4. the boot loader's fields
        mov ebx, BPARAMS
        cmp byte [ebx + 0x210], 0xFF        ; type_of_loader: undefined
        jne .f4
        cmp byte [ebx + 0x211], 1           ; loadflags as in the file
        jne .f4
        cmp dword [ebx + 0x214], 0x100000   ; code32_start
.f4:    mov esi, msg_loader
        call check

        ; 5. the command line
        mov esi, [BPARAMS + 0x228]
        mov edi, want_cmdline
        mov ecx, want_cmdline_len
        repe cmpsb
        mov esi, msg_cmdline
        call check

        ; 6. the E820 map
        cmp byte [BPARAMS + 0x1E8], 3
        jne .f6
        mov esi, BPARAMS + 0x2D0
        mov edi, want_e820
        mov ecx, 3 * 20
        repe cmpsb
.f6:    mov esi, msg_e820
        call check

        ; 7. the initrd
        cmp dword [BPARAMS + 0x218], (RAM_END - INITRD_SIZE) & ~0xFFF
        jne .f7
        cmp dword [BPARAMS + 0x21C], INITRD_SIZE
        jne .f7
        mov esi, (RAM_END - INITRD_SIZE) & ~0xFFF
        mov edi, want_initrd
        mov ecx, INITRD_SIZE
        repe cmpsb
.f7:    mov esi, msg_initrd
        call check

        ; 8. the RSDP
        cmp dword [BPARAMS + 0x070], 0xF0000
        jne .f8
        cmp dword [BPARAMS + 0x074], 0
        jne .f8
        cmp dword [0xF0000], "RSD "
        jne .f8
        cmp dword [0xF0004], "PTR "
.f8:    mov esi, msg_rsdp
        call check

        mov esi, msg_summary
        call puts
        mov eax, [failures]
        add al, '0'
        call putc
        mov esi, msg_failed
        call puts
        mov eax, [failures]
        test eax, eax
        setnz al
        movzx eax, al
        out 0xF4, eax
        cli
        hlt

; ZF set: "PASS: " + [esi], else "FAIL: " + [esi] and one more failure.
check:
        push esi
        mov esi, msg_pass
        je .ok
        inc dword [failures]
        mov esi, msg_fail
.ok:    call puts
        pop esi
        call puts
        mov al, 10
        jmp putc

puts:   lodsb
        test al, al
        jz .done
        call putc
        jmp puts
.done:  ret

putc:   push edx
        push eax
        mov dx, 0x3FD                       ; COM1 line status: wait for THRE
.wait:  in al, dx
        test al, 0x20
        jz .wait
        pop eax
        mov dx, 0x3F8
        out dx, al
        pop edx
        ret

want_cmdline:   db "bzimage=1", 0
want_cmdline_len equ $ - want_cmdline
want_e820:      dq 0, 0xA0000
                dd 1
                dq 0xA0000, 0x60000
                dd 2
                dq 0x100000, RAM_END - 0x100000
                dd 1
want_initrd:    db "vbts initrd", 10
msg_pass:       db "PASS: ", 0
msg_fail:       db "FAIL: ", 0
msg_entry:      db "bzimage: entered at code32_start 0x100000, CS 0x10, DS/ES/SS 0x18", 0
msg_zero:       db "bzimage: EBX, EBP and EDI are 0", 0
msg_params:     db "bzimage: ESI = boot_params at 0x9000 with the file's setup header (HdrS, 2.15)", 0
msg_loader:     db "bzimage: type_of_loader 0xFF, loadflags 0x01, code32_start 0x100000", 0
msg_cmdline:    db "bzimage: cmd_line_ptr holds the --append text", 0
msg_e820:       db "bzimage: E820 map of 3 entries, 128 MiB", 0
msg_initrd:     db "bzimage: 12-byte initrd at 0x7fff000", 0
msg_rsdp:       db "bzimage: acpi_rsdp_addr 0xf0000, RSD PTR there", 0
msg_summary:    db "SUMMARY: 8 tests, ", 0
msg_failed:     db " failed", 10, 0

        align 4
failures:       dd 0
entry_esi:      dd 0
entry_ebx:      dd 0
entry_ebp:      dd 0
entry_edi:      dd 0
entry_eip:      dd 0
entry_cs:       dw 0
entry_ds:       dw 0
entry_es:       dw 0
entry_ss:       dw 0
        align 16
        times 1024 db 0
stack_top:
