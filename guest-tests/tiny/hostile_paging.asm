; hostile_paging: 32-bit paging (CR4.PSE, CR0.WP; SDM vol. 3A 4.3) whose entries point outside RAM
; or back at the page directory, under guest data accesses and under the virtual PMU's own stores.
; This host's KVM cannot run 32-bit paging: tests.cfg runs the image with --engine=tcg.
;
; OOR = 0xF0000000 is not RAM (vbts: at most 3 GiB of RAM, nothing mapped there; QEMU: -m 128M).
; What a read of memory that is not there returns is the platform's, not the SDM's: vbts's bus
; returns all ones and drops writes (an empty PC bus; docs/guest-abi.md, "Memory map"), QEMU 7.2
; returns 0. The image reads physical OOR with paging off first (U) and derives every outcome
; from U, so the same checks hold on both; the lines that differ are in tests.cfg.
;
; Page directory `pd`:
;   PDE 0      4 MiB at physical 0 (P W PS): the image, its data and stack run there.
;   PDE 0x100  linear 0x40000000 -> page table `pt`; PTE 0 = OOR | P W: a frame beyond RAM.
;   PDE 0x101  not present at first; written through the self-map (below) -> `pt2` -> `alias`.
;   PDE 0x140  linear 0x50000000 -> a page table at OOR (beyond RAM).
;   PDE 0x180  linear 0x60000000 -> a 4 MiB page at OOR (P W PS).
;   PDE 0x3FF  linear 0xFFC00000 -> `pd` itself: the walk of any linear address in the top 4 MiB
;              reads the directory as its page table, so linear 0xFFC00000 + i * 4 KiB maps the
;              frame of PDE i, and linear 0xFFFFF000 (i = 0x3FF) maps the directory.
; Outcomes (each check names its derivation):
;  (a) a frame beyond RAM (PTE 0, PDE 0x180): reads return U, writes are dropped (read back: U);
;      the entries themselves are in RAM and get A and D (SDM 4.8).
;      A page table beyond RAM (PDE 0x140): its PTE reads U. U = all ones: present, writable,
;      frame 0xFFFFF000 (no reserved bits in a 32-bit PTE), so the access reaches physical
;      0xFFFFF000 and returns what that reads (measured with paging off: TOP); no #PF. U = 0: not
;      present: #PF with CR2 = the address, error code 0 (read) / 2 (write) (SDM 4.7).
;      Before vbts's fix the TCG engine sent such an access to an unassigned page: it read 0 with
;      no #PF (neither outcome), and a CR3 outside RAM ran zeros until --timeout
;      (hostile_cr3_oor.asm).
;  (b) the self-map: reads through it see the entries with the A flags the walk itself set (as
;      PDE and as PTE, before the read), a write through it changes the directory (D set in
;      PDE 0x3FF, which is the PTE of 0xFFFFF000) and the PDE written that way maps its page.
;  (c) the virtual PMU (BTS, 64-bit DS format; SKIP without it, as under QEMU): a buffer through
;      PTE 0 (frame beyond RAM) and a DS area through PDE 0x140 (page table beyond RAM) are
;      dropped, one vbts warning each, the index kept (docs/pmu-model.md, "Stores that do not land
;      in RAM"); a DS area and buffer in the directory, through the self-map, are read and
;      written as any store is: the record lands on PDEs 0x380-0x385, the index on PDE 0x302,
;      and vbts's walk sets A (as PDE and PTE) and D (the store) in PDE 0x3FF.
; Expected: status 1, every line PASS (QEMU: the PMU lines SKIP).
%include "rt.inc"
%include "debug32.inc"

%define OOR          0xF0000000
%define TOP_PAGE     0xFFFFF000
%define MARKER       0x5a5a1234
%define GOOD         0x600dcafe
%define SELF         0xFFFFF000                 ; linear address of the directory (PDE 0x3FF)
%define SELF_PDE(i)  (SELF + (i) * 4)            ; linear address of PDE i through the self-map
%define PDE(i)       (pd + (i) * 4)              ; its physical (= linear, under PDE 0) address

; SET_DS base, index, max, threshold: the BTS fields of `dsa` (upper dwords 0), IA32_DS_AREA = dsa.
%macro SET_DS 4
        mov dword [dsa + 0x00], %1
        mov dword [dsa + 0x04], 0
        mov dword [dsa + 0x08], %2
        mov dword [dsa + 0x0C], 0
        mov dword [dsa + 0x10], %3
        mov dword [dsa + 0x14], 0
        mov dword [dsa + 0x18], %4
        mov dword [dsa + 0x1C], 0
        WRMSR32 MSR_DS_AREA, dsa
%endmacro

; BRANCHES: BTS on (circular), three taken jumps, BTS off. Clobbers EAX, ECX, EDX.
%macro BRANCHES 0
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS
        jmp %%a
%%a:    jmp %%b
%%b:    jmp %%c
%%c:    WRMSR32 MSR_DEBUGCTL, 0
%endmacro

main:
        SET_HANDLER 14, pf_handler
        ; ---- what memory that is not there reads, with paging off
        mov eax, [OOR]
        mov [unbacked], eax
        mov eax, [TOP_PAGE]
        mov [top], eax
        PRINT "unbacked physical memory at 0xF0000000 reads "
        mov eax, [unbacked]
        PRINT_HEX32
        NEWLINE
        cmp dword [unbacked], 0
        je .u_ok
        cmp dword [unbacked], 0xFFFFFFFF
        je .u_ok
        FAIL "unbacked memory reads neither 0 nor all ones"
        ret
.u_ok:
        ; ---- the tables
        mov dword [PDE(0)], 0x83                     ; P W PS: 4 MiB at 0
        mov eax, pt
        or eax, 3
        mov [PDE(0x100)], eax
        mov dword [pt], OOR | 3                      ; PTE 0: frame beyond RAM, P W
        mov dword [PDE(0x140)], OOR | 3              ; page table beyond RAM
        mov dword [PDE(0x180)], OOR | 0x83           ; 4 MiB page beyond RAM
        mov eax, pd
        or eax, 3
        mov [PDE(0x3FF)], eax                        ; the self-map
        mov eax, alias
        or eax, 3
        mov [pt2], eax                               ; pt2's PTE 0: alias (used once PDE 0x101 exists)
        mov dword [alias], MARKER
        mov eax, pd
        mov cr3, eax
        mov eax, cr4
        or eax, 1 << 4                               ; PSE
        mov cr4, eax
        mov eax, cr0
        or eax, (1 << 31) | (1 << 16)                ; PG, WP
        mov cr0, eax
        jmp .paged
.paged:
        ; ---- (a) a frame beyond RAM: PTE 0 (4 KiB) and PDE 0x180 (4 MiB)
        mov eax, [0x40000000]
        CHECK_EQ eax, dword [unbacked], "PTE frame beyond RAM: a read returns what unbacked memory reads (U)"
        mov dword [0x40000000], GOOD
        mov eax, [0x40000000]
        CHECK_EQ eax, dword [unbacked], "PTE frame beyond RAM: a write is dropped (read back: U)"
        CHECK_EQ dword [pt], OOR | 0x63, "PTE frame beyond RAM: PTE 0 = OOR | P W A D"
        mov eax, [0x60000000 + 0x1234]
        CHECK_EQ eax, dword [unbacked], "4 MiB frame beyond RAM: a read returns U"
        mov dword [0x60000000 + 0x1234], GOOD
        mov eax, [0x60000000 + 0x1234]
        CHECK_EQ eax, dword [unbacked], "4 MiB frame beyond RAM: a write is dropped (read back: U)"
        CHECK_EQ dword [PDE(0x180)], OOR | 0xE3, "4 MiB frame beyond RAM: PDE 0x180 = OOR | P W A D PS"
        ; ---- (a) a page table beyond RAM: PDE 0x140
        mov dword [pf_count], 0
        mov eax, [0x50000000]                        ; A1 imm32 (5 bytes: the #PF handler skips it)
        mov [pt_read_eax], eax
        mov eax, [pf_count]
        mov [pt_read_pfs], eax
        mov eax, [pf_err]
        mov [pt_read_err], eax
        mov eax, GOOD
        mov dword [pf_count], 0
        mov [0x50000000], eax                        ; A3 imm32
        mov eax, [pf_count]
        mov [pt_write_pfs], eax
        mov eax, [pf_err]
        mov [pt_write_err], eax
        cmp dword [unbacked], 0
        je .pt_zero
        CHECK_EQ dword [pt_read_pfs], 0, "page table beyond RAM (its PTE all ones: present): a read, no #PF"
        CHECK_EQ dword [pt_read_eax], dword [top], "page table beyond RAM: the read returns physical 0xFFFFF000's dword"
        CHECK_EQ dword [pt_write_pfs], 0, "page table beyond RAM (PTE writable): a write, no #PF"
        mov eax, [0x50000000]
        CHECK_EQ eax, dword [top], "page table beyond RAM: the write is dropped (read back: physical 0xFFFFF000's dword)"
        jmp .pt_done
.pt_zero:
        CHECK_EQ dword [pt_read_pfs], 1, "page table beyond RAM (its PTE 0: not present): a read, #PF"
        CHECK_EQ dword [pt_read_err], 0, "page table beyond RAM: read #PF error code 0 (P=0, read)"
        CHECK_EQ dword [pt_write_pfs], 1, "page table beyond RAM: a write, #PF"
        CHECK_EQ dword [pt_write_err], 2, "page table beyond RAM: write #PF error code 2 (P=0, write)"
        CHECK_EQ dword [pf_cr2], 0x50000000, "page table beyond RAM: CR2 = 0x50000000"
.pt_done:
        ; ---- (b) the self-map. Writes through PDE 0 above set its D flag.
        mov eax, [SELF_PDE(0x3FF)]
        mov edx, pd
        or edx, 0x23                                 ; P W, A: set by this walk (as PDE and as PTE)
        CHECK_EQ eax, edx, "self-map: PDE 0x3FF reads itself = pd | P W A"
        mov eax, [SELF_PDE(0)]
        CHECK_EQ eax, 0xE3, "self-map: PDE 0 = P W A D PS (used and written through)"
        mov eax, [0xFFC00000 + 0x100 * 0x1000]       ; slot 0x100: the page PDE 0x100 points to (pt)
        CHECK_EQ eax, OOR | 0x63, "self-map: slot 0x100 maps pt (reads PTE 0)"
        mov eax, pt2
        or eax, 3
        mov [SELF_PDE(0x101)], eax                   ; a new PDE, written through the self-map
        mov edx, pt2
        or edx, 3
        CHECK_EQ dword [PDE(0x101)], edx, "self-map: a write lands in the directory (PDE 0x101 = pt2 | P W)"
        mov eax, [0x40400000]                        ; PDE 0x101 -> pt2 -> alias (not present before: not cached)
        CHECK_EQ eax, MARKER, "self-map: the PDE written through it maps linear 0x40400000"
        mov edx, pd
        or edx, 0x63
        CHECK_EQ dword [PDE(0x3FF)], edx, "self-map: PDE 0x3FF = pd | P W A D (D: the PTE of the write)"

        ; ---- (c) the virtual PMU's stores through such entries
        call dbg_probe32
        jc .no_bts
        cmp dword [dbg_fmt64], 1
        je .bts
.no_bts:
        SKIP "BTS buffer through a PTE frame beyond RAM (no BTS with the 64-bit DS format)"
        SKIP "DS area through a page table beyond RAM (no BTS with the 64-bit DS format)"
        SKIP "DS area and BTS buffer through the self-map (no BTS with the 64-bit DS format)"
        jmp pmu_done
.bts:
        ; the buffer at linear 0x40000000: PTE 0, frame OOR
        SET_DS 0x40000000, 0x40000000, 0x40000000 + 4 * 24, 0x40000000 + 4 * 24
        BRANCHES
        CHECK_EQ dword [dsa + 0x08], 0x40000000, "BTS buffer through a PTE frame beyond RAM: dropped, index kept"
        ; the DS area at linear 0x50000000: PDE 0x140, page table at OOR
        mov dword [dsa + 0x08], 0
        WRMSR32 MSR_DS_AREA, 0x50000000
        BRANCHES
        PASS "DS area through a page table beyond RAM: dropped, the guest runs on"
        ; the DS area at PDEs 0x300-0x307 and the buffer at PDEs 0x380-0x397, through the self-map.
        ; Its fields as PDEs are not present (bit 0 clear) and nothing uses linear 0xC0000000 up.
        mov edx, pd
        or edx, 3
        mov [PDE(0x3FF)], edx                        ; A and D clear again, then a TLB flush
        mov eax, pd
        mov cr3, eax
        mov dword [PDE(0x300)], SELF_PDE(0x380)      ; base
        mov dword [PDE(0x301)], 0
        mov dword [PDE(0x302)], SELF_PDE(0x380)      ; index
        mov dword [PDE(0x303)], 0
        mov dword [PDE(0x304)], SELF_PDE(0x380) + 4 * 24  ; maximum
        mov dword [PDE(0x305)], 0
        mov dword [PDE(0x306)], SELF_PDE(0x380) + 4 * 24  ; threshold
        mov dword [PDE(0x307)], 0
        WRMSR32 MSR_DS_AREA, SELF_PDE(0x300)
        WRMSR32 MSR_DEBUGCTL, DBG_TR | DBG_BTS
s1:     jmp s2                                       ; the one record: from s1, to s2
s2:     WRMSR32 MSR_DEBUGCTL, 0
        WRMSR32 MSR_DS_AREA, 0
        CHECK_EQ dword [PDE(0x380)], s1, "self-map: the record's from (s1) in PDE 0x380"
        CHECK_EQ dword [PDE(0x381)], 0, "self-map: from, high dword, in PDE 0x381"
        CHECK_EQ dword [PDE(0x382)], s2, "self-map: the record's to (s2) in PDE 0x382"
        CHECK_EQ dword [PDE(0x384)], 0, "self-map: the record's flags (0) in PDE 0x384"
        CHECK_EQ dword [PDE(0x302)], SELF_PDE(0x380) + 24, "self-map: index = base + 24 in PDE 0x302"
        mov edx, pd
        or edx, 0x63
        CHECK_EQ dword [PDE(0x3FF)], edx, "self-map: PDE 0x3FF = pd | P W A D (vbts's walk: A read, D stored)"
pmu_done:
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
        add dword [ebx + F32_EIP], 5
        ret

section .data
align 4
unbacked:       dd 0
top:            dd 0
pf_count:       dd 0
pf_cr2:         dd 0
pf_err:         dd 0
pt_read_eax:    dd 0
pt_read_pfs:    dd 0
pt_read_err:    dd 0
pt_write_pfs:   dd 0
pt_write_err:   dd 0
align 64
dsa:            times 0x40 db 0
align 4096
pd:             times 1024 dd 0
pt:             times 1024 dd 0
pt2:            times 1024 dd 0
alias:          times 1024 dd 0

%include "end.inc"
