; paging32_pm32: 32-bit paging without long mode (SDM vol. 3A 4.3), the paging mode this
; host's KVM cannot run (the MOV to CR0 that sets PG takes #GP there: docs/host-support.md)
; and vbts's TCG engine can (docs/tcg-engine.md; tests.cfg runs it with --engine=tcg).
;
; Page directory `pd`: PDE 0 maps linear 0..4 MiB to physical 0..4 MiB with one 4-MiB page
; (PS=1, CR4.PSE=1), so the image keeps running where it was loaded; PDE 0x100 (linear
; 0x40000000) points to the page table `pt`, whose PTE 0 maps the data page `alias` (W=1)
; and PTE 1 maps it again read-only (W=0). Then, with CR0.WP=1 (SDM 4.6):
;   - a read of linear 0x40000000 returns what `alias` holds (the marker 0x5a5a1234);
;   - a write through 0x40000000 is seen at `alias`, and sets PTE 0's A and D bits (SDM 4.8);
;   - a read of linear 0x80000000 (PDE 0x200 not present) is #PF with CR2 = 0x80000000 and
;     error code 0 (P=0, read, supervisor; SDM 4.7), EIP = the faulting MOV;
;   - a write through 0x40001000 (PTE 1, W=0, WP=1) is #PF with error code 3 (P=1, write).
; The #PF handler records CR2, the error code and EIP, and resumes after the 5-byte MOV.
; Expected: status 1, every line PASS.
%include "rt.inc"

%define MARKER 0x5a5a1234

main:
        SET_HANDLER 14, pf_handler
        ; page tables (the image is loaded at its link address, below 4 MiB)
        mov dword [pd], 0x83                         ; P, W, PS: 4 MiB at 0
        mov eax, pt
        or eax, 3
        mov [pd + 0x100 * 4], eax                    ; linear 0x40000000 -> pt
        mov eax, alias
        or eax, 3
        mov [pt], eax                                ; PTE 0: alias, P W
        mov eax, alias
        or eax, 1
        mov [pt + 4], eax                            ; PTE 1: alias, P (read-only)
        mov dword [alias], MARKER
        mov eax, pd
        mov cr3, eax
        mov eax, cr4
        or eax, 1 << 4                               ; PSE
        mov cr4, eax
        mov eax, cr0
        or eax, (1 << 31) | (1 << 16)                ; PG, WP
        mov cr0, eax
        jmp .paged                                   ; (a jump after enabling paging, SDM 9.9.1)
.paged:
        mov eax, [0x40000000]
        CHECK_EQ eax, MARKER, "linear 0x40000000 reads the page PTE 0 maps"
        mov dword [0x40000000], 0x600dcafe
        CHECK_EQ dword [alias], 0x600dcafe, "a write through the alias reaches the page"
        mov eax, [pt]
        and eax, 0x60
        CHECK_EQ eax, 0x60, "PTE 0: accessed and dirty set"
        mov eax, [pt + 4]
        and eax, 0x60
        CHECK_EQ eax, 0, "PTE 1 untouched: A and D clear"

        mov dword [pf_count], 0
np_site:
        mov eax, [0x80000000]                        ; 5 bytes: A1 imm32
        CHECK_EQ dword [pf_count], 1, "not-present read: one #PF"
        CHECK_EQ dword [pf_cr2], 0x80000000, "not-present read: CR2 = 0x80000000"
        CHECK_EQ dword [pf_err], 0, "not-present read: error code 0 (P=0, read, supervisor)"
        CHECK_EQ dword [pf_eip], np_site, "not-present read: EIP = the MOV"

        mov dword [pf_count], 0
ro_site:
        mov [0x40001000], eax                        ; 5 bytes: A3 imm32
        CHECK_EQ dword [pf_count], 1, "read-only write with CR0.WP: one #PF"
        CHECK_EQ dword [pf_cr2], 0x40001000, "read-only write: CR2 = 0x40001000"
        CHECK_EQ dword [pf_err], 3, "read-only write: error code 3 (P=1, write, supervisor)"
        CHECK_EQ dword [pf_eip], ro_site, "read-only write: EIP = the MOV"

        mov eax, cr0
        and eax, ~(1 << 31)
        mov cr0, eax
        ret

; ebx = frame: record the fault, skip the 5-byte MOV.
pf_handler:
        inc dword [pf_count]
        mov eax, cr2
        mov [pf_cr2], eax
        mov eax, [ebx + F32_ERROR]
        mov [pf_err], eax
        mov eax, [ebx + F32_EIP]
        mov [pf_eip], eax
        add dword [ebx + F32_EIP], 5
        ret

section .data
align 4
pf_count:       dd 0
pf_cr2:         dd 0
pf_err:         dd 0
pf_eip:         dd 0
align 4096
pd:             times 1024 dd 0
pt:             times 1024 dd 0
alias:          times 1024 dd 0

%include "end.inc"
