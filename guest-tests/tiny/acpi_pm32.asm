; acpi_pm32: the machine described by ACPI, as an OS reads it (ACPI 6.4 chapter 5) and powers
; off with it. Ring 0, pm32. Nothing in it knows where vbts or QEMU put things: it follows
; the tables, so the same checks hold for vbts's tables (vmm/acpi_tables.h) and SeaBIOS's.
; 1. The RSDP: "RSD PTR " at a 16-byte boundary in 0xE0000-0xFFFFF, its first 20 bytes summing
;    to 0 (5.2.5.3). The RSDT it points at, and the FADT ("FACP") among the RSDT's entries,
;    each summing to 0 over its length (5.2.6).
; 2. The FADT's PM timer (PM_TMR_BLK, 4.8.3.3): read twice around a 200 000-iteration loop, it
;    moved forward; with TMR_VAL_EXT (FADT flags bit 8) clear it is a 24-bit counter, so bits
;    31:24 read 0.
; 3. PM1a_CNT's SCI_EN (bit 0) reads 1: the machine is in ACPI mode, as FADT SMI_CMD = 0 says
;    (4.8.3.2.1); when SMI_CMD is not 0 (SeaBIOS) the image first writes ACPI_ENABLE there.
; 4. The DSDT's \_S5 package: its first element is SLP_TYPa for soft-off (7.4.2).
; 5. SLP_TYPa << 10 | SLP_EN (bit 13) to PM1a_CNT: the machine powers off (16.1.6). The image
;    prints its summary first; it never reaches its own exit.
; Expected: status 0 (powered off) under vbts and under QEMU (SeaBIOS's tables, PIIX4's PM).
%include "rt.inc"
%include "acpi32.inc"

main:
        ; ---- 1. RSDP, RSDT, FADT
        call acpi_find_fadt32
        test ebx, ebx
        jnz .fadt
        FINISH
.fadt:
        mov [fadt], ebx

        ; ---- 2. PM timer
        mov edx, [ebx + 76]             ; PM_TMR_BLK
        test edx, edx
        jnz .have_timer
        FAIL "FADT: a PM timer (PM_TMR_BLK)"
        FINISH
.have_timer:
        in eax, dx
        mov edi, eax
        mov ecx, 200000
.spin:
        dec ecx
        jnz .spin
        in eax, dx
        mov esi, eax
        test dword [ebx + 112], 1 << 8  ; TMR_VAL_EXT
        jnz .ext
        mov eax, esi
        shr eax, 24
        CHECK_EQ eax, 0, "PM timer: 24 bits (TMR_VAL_EXT clear), bits 31:24 read 0"
        mov eax, esi
        sub eax, edi
        and eax, 0xFFFFFF
        jmp .moved
.ext:
        mov eax, esi
        sub eax, edi
.moved:
        test eax, eax
        CHECK_CC nz, "PM timer: moved forward over 200 000 iterations"

        ; ---- 3. ACPI mode
        mov edx, [ebx + 48]             ; SMI_CMD
        test edx, edx
        jz .acpi_mode
        mov al, [ebx + 52]              ; ACPI_ENABLE
        out dx, al
.acpi_mode:
        mov edx, [ebx + 64]             ; PM1a_CNT_BLK
        mov ecx, 1000000
.wait_sci:
        in ax, dx
        test ax, 1
        jnz .sci
        dec ecx
        jnz .wait_sci
.sci:
        and eax, 1
        CHECK_EQ eax, 1, "PM1a_CNT: SCI_EN reads 1 (ACPI mode)"

        ; ---- 4. \_S5 in the DSDT
        mov esi, [ebx + 40]             ; DSDT
        cmp dword [esi], 'DSDT'
        REPORT "DSDT at the FADT's DSDT address"
        mov ecx, [esi + 4]
        lea edi, [esi + ecx - 5]        ; last place "_S5_" and one more byte fit
        add esi, 36
.find_s5:
        cmp esi, edi
        jae .no_s5
        cmp dword [esi], '_S5_'
        jne .s5_next
        cmp byte [esi + 4], 0x12        ; PackageOp
        je .s5
.s5_next:
        inc esi
        jmp .find_s5
.no_s5:
        FAIL "DSDT: Name (_S5, Package {...})"
        FINISH
.s5:
        PASS "DSDT: Name (_S5, Package {...})"
        movzx eax, byte [esi + 5]       ; PkgLength: 1 byte when bits 7:6 are 0
        test al, 0xC0
        jz .len1
        FAIL "\_S5: a one-byte PkgLength"
        FINISH
.len1:
        movzx eax, byte [esi + 7]       ; first element (after NumElements)
        cmp al, 0x0A                    ; BytePrefix
        jne .const
        movzx eax, byte [esi + 8]
        jmp .slp_typ
.const:
        cmp al, 0x01                    ; OneOp (ZeroOp 0 stays 0)
        ja .bad_elem
.slp_typ:
        mov [slp_typ], eax
        PRINT "\_S5 SLP_TYPa = "
        PRINT_DEC
        NEWLINE

        ; ---- 5. soft-off
        mov eax, [rt_failures]
        CHECK_EQ eax, 0, "no failures before powering off"
        PRINT "SUMMARY: "
        mov eax, [rt_tests]
        PRINT_DEC
        PRINTLN " tests, 0 unexpected failures (powering off through PM1a_CNT)"
        mov edx, [ebx + 64]
        mov eax, [slp_typ]
        shl eax, 10
        or eax, 1 << 13                 ; SLP_EN
        out dx, ax
        mov ecx, 100000000
.wait_off:
        dec ecx
        jnz .wait_off
        FAIL "the machine is still running after SLP_EN"
        FINISH
.bad_elem:
        FAIL "\_S5: first element is BytePrefix, ZeroOp or OneOp"
        FINISH

section .data
fadt:           dd 0
slp_typ:        dd 0

%include "end.inc"
