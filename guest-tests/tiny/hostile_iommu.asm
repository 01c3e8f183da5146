; hostile_iommu: the VT-d unit and the edu device (--device=edu,intel-iommu) pointed outside
; RAM and at themselves. The unit reads its tables and writes wait-descriptor status through
; guest-physical memory, and the edu's DMA goes through the unit to RAM: none of it may reach
; anything but guest RAM (docs/security.md, "Hostile guests"; vmm/intel_iommu.h). RAM is the
; default 128 MiB: it ends at 0x8000000; 0xF0000000 is nothing.
; 1. Root table at 0xF0000000: a DMA write faults with reason 8 (root table access error).
; 2. Second-level table at the LAPIC page (MMIO, not RAM): reason 7 (paging entry access);
;    the LAPIC's TPR stays 0.
; 3. IOVA 0-1FFFH mapped to the last page of RAM and to the first page beyond it: an 8-byte
;    DMA write at IOVA FFCH puts its first 4 bytes at 0x7FFFFFC and drops the rest; no fault
;    is recorded (the unit translated both pages; RAM refused the second).
; 4. A second-level table that maps itself at every level: IOVA 0 is the table's own page;
;    a DMA write at IOVA 10H lands in the table at +10H.
; 5. The invalidation queue at 0xF0000000: IQE, IQH stays 0. Moved into RAM with a wait
;    descriptor whose status address is 0xF0000000: IQE again, IQH 0; with the status address
;    in RAM: the status (C0FFEEH) is written and IQH moves to 10H.
; 6. The interrupt remapping table at 0xF0000000: an MSI is blocked with reason 23H. In RAM
;    with 2 entries (S = 0): handle 5 is blocked with reason 21H. No interrupt arrives.
; Expected: status 1, 18 checks; QEMU is not run (no edu or intel-iommu on its PC machine).
%include "rt.inc"
%include "edu_vtd.inc"

%define RAM_END         0x8000000
%define NOWHERE         0xF0000000
%define STATUS          0x406800
%define FSTS_PPF        2
%define FSTS_IQE        0x10

main:
        SET_HANDLER 0x70, stray
        APIC_ENABLE
        call edu_init
        cld
        mov edi, ROOT                   ; the tables' pages, cleared
        mov ecx, 0x9000 / 4
        xor eax, eax
        rep stosd
        mov esi, 4
        ; ---- 1. root table beyond RAM
        mov dword [RTADDR], NOWHERE
        mov dword [RTADDR + 4], 0
        mov eax, SRTP
        call vtd_command
        mov eax, TE
        call vtd_command
        call dma_to_iova0
        CHECK_EQ dword [FSTS], FSTS_PPF, "root table beyond RAM: a fault"
        CHECK_EQ dword [FRCD + 12], 0x80000008, "root table beyond RAM: reason 8"
        call clear_fault
        ; ---- 2. second-level table at the LAPIC page
        mov dword [ROOT], CTX | 1
        mov dword [CTX + 16 * 0x18], 0xFEE00000 | 1
        mov dword [CTX + 16 * 0x18 + 8], 1 | (EDU_SID << 8)
        mov dword [RTADDR], ROOT
        mov eax, SRTP
        call vtd_command
        call dma_to_iova0
        CHECK_EQ dword [FRCD + 12], 0x80000007, "second-level table at the LAPIC page: reason 7"
        mov eax, 0x080                  ; TPR
        call rt_lapic_read32
        CHECK_EQ eax, 0, "LAPIC TPR untouched"
        call clear_fault
        ; ---- 3. a transfer across the end of RAM
        mov dword [CTX + 16 * 0x18], L3 | 1
        mov dword [L3], L2 | 3
        mov dword [L2], L1 | 3
        mov dword [L1], (RAM_END - 0x1000) | 3
        mov dword [L1 + 8], RAM_END | 3
        mov dword [L1 + 16], DATA | 3                       ; IOVA 2000H -> DATA
        mov dword [DATA], 0x11223344
        mov dword [DATA + 4], 0x55667788
        mov dword [RAM_END - 4], 0
        mov eax, 0x2000                 ; DATA -> buffer, 8 bytes
        mov edx, 0x40000
        mov ecx, 1
        mov esi, 8
        call edu_dma
        mov eax, 0x40000                ; buffer -> IOVA FFCH..1003H
        mov edx, 0xFFC
        mov ecx, 1 | 2
        call edu_dma
        CHECK_EQ dword [RAM_END - 4], 0x11223344, "across the end of RAM: the first 4 bytes in RAM's last dword"
        CHECK_EQ dword [FSTS], 0, "across the end of RAM: no fault recorded"
        mov esi, 4
        ; ---- 4. a table that maps itself
        mov dword [LOOP], LOOP | 3
        mov dword [CTX + 16 * 0x18], LOOP | 1
        mov eax, 0x40000                ; buffer (still 11223344H...) -> IOVA 10H = LOOP + 10H
        mov edx, 0x10
        mov ecx, 1 | 2
        call edu_dma
        CHECK_EQ dword [LOOP + 0x10], 0x11223344, "self-mapping table: IOVA 10H is the table's own +10H"
        CHECK_EQ dword [LOOP], LOOP | 3, "self-mapping table: its entry 0 unchanged"
        ; ---- 5. invalidation queue
        mov dword [IQA], NOWHERE
        mov dword [IQA + 4], 0
        mov eax, QIE
        call vtd_command
        mov dword [IQT], 0x10
        mov eax, [FSTS]
        and eax, FSTS_IQE
        CHECK_EQ eax, FSTS_IQE, "queue beyond RAM: IQE"
        CHECK_EQ dword [IQH], 0, "queue beyond RAM: IQH stays 0"
        mov dword [FSTS], FSTS_IQE      ; write 1 to clear
        mov dword [QUEUE], 5 | (1 << 5) ; wait, SW; status data C0FFEEH
        mov dword [QUEUE + 4], 0xC0FFEE
        mov dword [QUEUE + 8], NOWHERE
        mov dword [QUEUE + 12], 0
        mov dword [IQA], QUEUE
        mov dword [IQT], 0x10
        mov eax, [FSTS]
        and eax, FSTS_IQE
        CHECK_EQ eax, FSTS_IQE, "status address beyond RAM: IQE"
        mov dword [FSTS], FSTS_IQE
        mov dword [QUEUE + 8], STATUS
        mov dword [IQT], 0x10
        CHECK_EQ dword [STATUS], 0xC0FFEE, "status address in RAM: written"
        CHECK_EQ dword [IQH], 0x10, "status address in RAM: IQH moves on"
        CHECK_EQ dword [FSTS], 0, "no fault left"
        ; ---- 6. interrupt remapping table
        mov dword [IRTA], NOWHERE | 3
        mov dword [IRTA + 4], 0
        mov eax, SIRTP
        call vtd_command
        mov eax, IRE
        call vtd_command
        mov ecx, 0xFEE00000 | (1 << 4)  ; MSI: handle 0, remappable
        xor edx, edx
        call edu_msi
        sti
        call edu_raise
        CHECK_EQ dword [FRCD + 12], 0x80000023, "remapping table beyond RAM: reason 23H"
        call clear_fault
        call edu_ack
        mov dword [IRTA], IRT           ; S = 0: 2 entries
        mov eax, SIRTP
        call vtd_command
        mov eax, 0x44
        mov ecx, 0xFEE00000 | (5 << 5) | (1 << 4)
        call pci_write
        call edu_raise
        CHECK_EQ dword [FRCD + 12], 0x80000021, "handle 5 of 2 entries: reason 21H"
        CHECK_EQ dword [FRCD + 4], 0x00050000, "the fault record names index 5"
        CHECK_EQ dword [strays], 0, "no interrupt arrived"
        cli
        ret

dma_to_iova0:                           ; 4 bytes from the edu's buffer to IOVA 0
        mov eax, 0x40000
        xor edx, edx
        mov ecx, 1 | 2
        jmp edu_dma

clear_fault:
        mov dword [FRCD + 12], 0x80000000
        ret

stray:
        inc dword [strays]
        APIC_EOI
        ret

section .data
align 4
strays:         dd 0

%include "end.inc"
