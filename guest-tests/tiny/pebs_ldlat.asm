; pebs_ldlat: the load-latency PEBS facility that Linux's `perf mem` uses (SDM vol. 3B
; 18.3.4.4.2 for Nehalem/Westmere, 18.9.4 Skylake, 18.9.2.3 the memory info group of adaptive
; PEBS; docs/pmu-model.md, "Load latency and data source"), 32-bit ring 0. The event:
; MEM_INST_RETIRED.LATENCY_ABOVE_THRESHOLD (0BH/10H) on Westmere, MEM_TRANS_RETIRED.LOAD_LATENCY
; (CDH/01H) on Skylake and Ice Lake (dbg_core_gen32); it counts loads slower than
; MSR_PEBS_LD_LAT_THRESHOLD (3F6H), and its PEBS record holds the load's data linear address,
; data source and latency: 98H/A0H/A8H in formats 1 and 3, the memory info group's first three
; fields in format 4 (PEBS_DATA_CFG.MemInfo, the counter's Adaptive_Record bit). PEBS_ENABLE:
; bit 0, and LL_EN (bit 32) up to format 3. Other CPUs, and those without PEBS, SKIP.
; vbts's model of where data comes from: the model's L1D, L2 and L3 (pmu/cache_model.h: LRU,
; set = line number modulo the sets, the adjacent line of a missed 128-byte pair prefetched into
; L2 and L3), fed every data access while the event counts, so the lines here start cold; one
; latency per level: L1D 4, L2 12, L3 44, DRAM 200 cycles; data source L1D 01H, L2 03H, L3
; 04H, DRAM 0CH on Westmere ("L3 miss, local DRAM, exclusive") and 0AH from Skylake on.
; PMC0 starts at 2^48 - 1 and its PEBS reset value is 2^48 - 1: the 1st counted load wraps it
; (PEBS armed), the 2nd causes the assist (record) and the reload, and so on.
;   w1 (threshold 30, Linux's default): l1 `mov eax,[A]` DRAM, counted: wraps; l2 [A] again, an
;      L1D hit (4): no; s1 a store to a cold line: not this event's; l3 [A+64], the pair l1's
;      miss brought into L2 (12): no; then 1000 loads of [A], L1D hits: no (the TCG engine counts
;      them in bulk while the assist is armed for this event alone: docs/tcg-engine.md, "Load
;      latency with one hook a block"); l4 [B] DRAM: record 1 (B, DRAM, 200; formats 1 and 3:
;      RCX = 0, the loop's count, in the record's registers at 20H).
;   w2: threshold 0xFFFF (nothing counts; the caches still see the loads): [C] and 21 lines 64 KB
;      apart, which share C's L1D set (64 sets, 8/12 ways) and L2 set (512 or 1024 sets, at most
;      20 ways) but fall in other L3 sets (12288, 8192 or 81920 sets, 12 or 16 ways): C leaves
;      L1D and L2 and stays in L3. Threshold 30: l5 [E] DRAM: wraps; l6 [C] an L3 hit (44):
;      record 2 (C, L3 hit, 44).
;   w3: threshold 3 (the minimum the SDM allows): l7 [A] an L1D hit (4 > 3): wraps; l8 [A+64],
;      in the L1D since l3: record 3 (A+64, L1D hit, 4).
; Record IPs: formats 1 and 3 are trap-like (RIP = the next instruction; format 3 also has the
; EventingIP at B0H), format 4's basic group holds the eventing IP. No PMI: the buffer's
; threshold is its 4th record.
; Expected: status 1 under vbts (westmere, skylake, icelake-server); QEMU TCG: SKIP (155).
%include "rt.inc"
%include "debug32.inc"

%define A               0x800000
%define B               0x900000
%define E               0xA00000
%define C               0xC00800
%define NREC            4

main:
        call dbg_core_gen32
        test eax, eax
        jz .skip
        cmp eax, 1
        jne .later
        mov dword [event], 0x100B
        mov dword [dram], 0x0C
.later:
        call dbg_pmu_probe32            ; DS, DTES64, PDCM, a PEBS format, MISC_ENABLE[12] clear
        jc .skip
        mov eax, [dbg_pebs_fmt]
        mov [fmt], eax
        cmp eax, 3
        jb .setup                       ; format 1: 0xB0-byte records, fields at 98H
        mov dword [rec], 0xC8
        je .setup                       ; format 3
        mov dword [rec], 0x40           ; format 4: basic group + memory info group
        mov dword [f_dla], 0x20
        jmp .setup
.skip:
        SKIP "load-latency PEBS: a Westmere, Skylake or Ice Lake model with PEBS"
        ret

.setup:
        mov eax, pebs_buffer
        mov [ds_area + 0x20], eax       ; PEBS base
        mov [ds_area + 0x28], eax       ; index
        mov ecx, [rec]
        imul ecx, NREC
        add eax, ecx
        mov [ds_area + 0x30], eax       ; absolute maximum: 4 records
        mov [ds_area + 0x38], eax       ; interrupt threshold: the 4th record (none comes)
        mov dword [ds_area + 0x40], 0xFFFFFFFF
        mov dword [ds_area + 0x44], 0x0000FFFF   ; PMC0 reset: 2^48 - 1
        WRMSR32 MSR_DS_AREA, ds_area
        WRMSR32 0x38F, 0
        WRMSR32 0xC1, 0xFFFFFFFF        ; 2^48 - 1 (sign-extended)
        xor edx, edx
        cmp dword [fmt], 4
        jb .sel
        WRMSR32 0x3F2, 1                ; PEBS_DATA_CFG: the memory info group
        mov edx, 1 << (34 - 32)         ; Adaptive_Record
.sel:
        mov eax, [event]
        or eax, (1 << 17) | (1 << 22)   ; OS, EN
        mov ecx, 0x186
        wrmsr
        xor edx, edx
        cmp dword [fmt], 4
        jae .pebs_en
        mov edx, 1                      ; LL_EN for PMC0 (bit 32)
.pebs_en:
        mov ecx, 0x3F1
        mov eax, 1
        wrmsr
        WRMSR32 0x3F6, 30
        WRMSR32 0x38F, 1
        ; w1
l1:     mov eax, [A]
l2:     mov eax, [A]
s1:     mov [B + 0x40000], eax
l3:     mov eax, [A + 64]
        mov ecx, 1000                   ; w1b: 1000 L1D hits of [A] while the assist is armed
.spin:  mov edx, [A]
        dec ecx
        jnz .spin
l4:     mov eax, [B]
l4_next:
        ; w2
        WRMSR32 0x3F6, 0xFFFF
        mov esi, C
        mov ebx, 22
.evict: mov eax, [esi]
        add esi, 0x10000
        dec ebx
        jnz .evict
        WRMSR32 0x3F6, 30
l5:     mov eax, [E]
l6:     mov eax, [C]
l6_next:
        ; w3
        WRMSR32 0x3F6, 3
l7:     mov eax, [A]
l8:     mov eax, [A + 64]
l8_next:
        WRMSR32 0x38F, 0
        WRMSR32 0x3F1, 0
        call dump_records
        mov eax, [ds_area + 0x28]
        sub eax, pebs_buffer
        mov ecx, [rec]
        imul ecx, 3
        CHECK_EQ eax, ecx, "three records (PEBS index = base + 3 records)"
        mov esi, pebs_buffer
        mov edx, l4
        mov edi, l4_next
        call check_ip
        CHECK_EQ eax, 1, "record 1: the load at l4"
        mov ebx, [f_dla]
        CHECK_EQ dword [esi + ebx], B, "record 1: data linear address B"
        mov eax, [dram]
        CHECK_EQ dword [esi + ebx + 8], eax, "record 1: data source DRAM (0CH on Westmere, 0AH later)"
        CHECK_EQ dword [esi + ebx + 16], 200, "record 1: latency 200"
        cmp dword [fmt], 4
        jae .no_gprs
        CHECK_EQ dword [esi + 0x20], 0, "record 1: RCX = 0 (the 1000 L1D hits before l4 ran)"
.no_gprs:
        add esi, [rec]
        mov edx, l6
        mov edi, l6_next
        call check_ip
        CHECK_EQ eax, 1, "record 2: the load at l6"
        CHECK_EQ dword [esi + ebx], C, "record 2: data linear address C"
        CHECK_EQ dword [esi + ebx + 8], 0x04, "record 2: data source L3 hit (04H)"
        CHECK_EQ dword [esi + ebx + 16], 44, "record 2: latency 44"
        add esi, [rec]
        mov edx, l8
        mov edi, l8_next
        call check_ip
        CHECK_EQ eax, 1, "record 3: the load at l8"
        CHECK_EQ dword [esi + ebx], A + 64, "record 3: data linear address A+64"
        CHECK_EQ dword [esi + ebx + 8], 0x01, "record 3: data source L1D hit (01H)"
        CHECK_EQ dword [esi + ebx + 16], 4, "record 3: latency 4"
        mov ecx, 0xC1
        rdmsr
        CHECK_EQ eax, 0xFFFFFFFF, "PMC0 = the reset value after record 3's assist"
        mov ecx, 0x3F6
        rdmsr
        CHECK_EQ eax, 3, "MSR_PEBS_LD_LAT_THRESHOLD reads back 3"
        ret

; ESI = record, EDX = the load, EDI = the instruction after it -> EAX = 1 if the record's IP
; fields name that load: format 4's eventing IP (08H) = EDX; formats 1 and 3: RIP (08H) = EDI,
; and format 3's EventingIP (B0H) = EDX.
check_ip:
        xor eax, eax
        cmp dword [fmt], 4
        jb .trap
        cmp [esi + 0x08], edx
        sete al
        ret
.trap:
        cmp [esi + 0x08], edi
        jne .done
        cmp dword [fmt], 3
        jb .yes
        cmp [esi + 0xB0], edx
        jne .done
.yes:   mov eax, 1
.done:  ret

; Book-style dump: each record's IP, data linear address, data source and latency.
dump_records:
        pushad
        mov esi, pebs_buffer
        mov ebx, [f_dla]
.r:
        cmp esi, [ds_area + 0x28]
        jae .out
        PRINT "  ip="
        mov eax, [esi + 0x08]
        PRINT_HEX32
        PRINT " addr="
        mov eax, [esi + ebx]
        PRINT_HEX32
        PRINT " source="
        mov eax, [esi + ebx + 8]
        PRINT_HEX32
        PRINT " latency="
        mov eax, [esi + ebx + 16]
        PRINT_HEX32
        NEWLINE
        add esi, [rec]
        jmp .r
.out:
        popad
        ret

section .data
align 8
ds_area:        times 0xA0 db 0
event:          dd 0x01CD
dram:           dd 0x0A
fmt:            dd 0
rec:            dd 0xB0
f_dla:          dd 0x98
align 64
pebs_buffer:    times NREC * 0xC8 db 0

%include "end.inc"
