; p4_pebs: NetBurst's precise event-based sampling (SDM vol. 3B, "Precise Event-Based Sampling
; (PEBS)" of the NetBurst performance-monitoring section and the DS save area's 32-bit figures;
; docs/pmu-model.md, "NetBurst PEBS"), programmed as perfmon2's Pentium 4 PEBS sampling format
; did on real parts: the DS area's PEBS fields with a counter reset, an ESCR that tags µops, an
; at-retirement event on MSR_IQ_COUNTER4 (the one PEBS counter) and MSR_PEBS_ENABLE.
; 32-bit ring 0, no paging, LVT perfmon = vector 0x50.
;
; Which CPU: CPUID.1 family 0FH. Elsewhere (westmere: Core PEBS, SDM 18.6.1) MSR_PEBS_ENABLE's
; NetBurst bits UOP_TAG (24) and ENABLE_PEBS_MY_THR (25) are reserved, and the RAT ESCR is no
; MSR: WRMSR 3F1H, 03000000H and RDMSR 3BCH #GP, and the image stops there.
;
; NetBurst, part 1: IA32_MISC_ENABLE bit 12 (PEBS unavailable) is clear.
; Part 2: PEBS records, fault-like, for tagged loads.
;   MSR_RAT_ESCR0 (3BCH) = 04000408H: uop_type (event select 02H, bits 30:25), TAGLOADS (mask
;   bit 1 = bit 10), T0_OS (3): the front end tags load µops at CPL 0.
;   MSR_CRU_ESCR2 (3CCH) = 10000208H: front_end_event (08H), NBOGUS (bit 9), T0_OS.
;   MSR_IQ_COUNTER4 (310H) = -4 (40 bits); MSR_PEBS_ENABLE (3F1H) = 03000000H (UOP_TAG,
;   ENABLE_PEBS_MY_THR); MSR_IQ_CCCR4 (370H) = 0003B000H: Enable (12), ESCR select 5
;   (CRU_ESCR2), active thread 11B; OVF_PMI clear (the PEBS threshold interrupts, as
;   perfmon2's format wanted). DS (32-bit format): PEBS base = buf, index = buf, absolute
;   maximum = buf + 4 * 40, threshold = buf + 3 * 40, counter reset (20H) = -3.
;   Loop, 10 iterations (ECX = 10 .. 1), data v[j] = 111H * (j + 1):
;     L: mov eax, [esi]        a load: 1 tagged µop
;        add ebx, eax
;        lock inc dword [cnt]  load + store, locked: not taggable
;        xchg edx, [tmp]       load + store, locked (XCHG with memory): not taggable
;        add esi, 4
;        dec ecx
;        jnz L
;   Only L's load counts: -4 + 4 = 0 at iteration 4 (overflow: a record; reset to -3), again
;   at iterations 7 and 10. The record (40 bytes: EFLAGS, linear IP, EAX, EBX, ECX, EDX, ESI,
;   EDI, EBP, ESP) holds the registers as L began ("Nominally the register values are those at
;   the beginning of the instruction that caused the event"), its IP is L. Before L of
;   iteration k (k-1 iterations done): EAX = v[k-2] = 111H * (k-1), EBX = 111H * (k-1)k/2,
;   ECX = 11 - k, EDX = T0 (7070_7070H) after an odd number of XCHGs, else E0 (E0E0_E0E0H),
;   ESI = data + 4(k-1), EDI = D1D1_D1D1H, EBP = B0B0_B0B0H, ESP = the loop's stack pointer,
;   EFLAGS = 202H (IF, bit 1; the last flag writers: ADD ESI (CF = 0), DEC ECX from 12-k to
;   11-k: ZF = SF = OF = AF = 0 and an odd number of ones in 7, 4 and 1: PF = 0).
;     k = 4:  EAX = 333H, EBX = 666H,  ECX = 7, EDX = T0, ESI = data + 12
;     k = 7:  EAX = 666H, EBX = 1665H, ECX = 4, EDX = E0, ESI = data + 24
;     k = 10: EAX = 999H, EBX = 2FFDH, ECX = 1, EDX = T0, ESI = data + 36
;   The third record brings the index to the threshold: the PMI follows L of iteration 10
;   (frame EIP = L's next instruction); the handler clears the CCCR's Enable before any load
;   (its pushes are stores, not tagged). Afterwards: index = buf + 120, IQ_COUNTER4 = the reset
;   value -3 (FF_FFFF_FFFDH), cnt = 10, the CCCR without OVF_PMI and with OVF (bit 31): the
;   counter overflowed (three times).
; Part 3: counting tagged loads and stores without PEBS: MSR_IQ_COUNTER5 (311H) with
;   MSR_CRU_ESCR3 (3CDH) = front_end_event NBOGUS T0_OS and MSR_RAT_ESCR0 = TAGLOADS |
;   TAGSTORES; MSR_IQ_CCCR5 (371H) = 0003B000H. 100 iterations of
;     mov eax, [esi] (1) | mov [edi], eax (1) | add [edi], eax (2: a load and a store µop)
;     | lock add [edi], eax (0) | push eax (1) | pop eax (1) | call leaf (1: its store)
;     | leaf: ret (0: returns are not taggable) | dec ecx | jnz
;   = 7 an iteration: 700 (the enabling WRMSR and the disabling macro load and store nothing).
; Part 4: MSR rules: MSR_PEBS_ENABLE bits 26 (ENABLE_PEBS_OTH_THR, HT only) and 23 #GP,
;   MSR_PEBS_MATRIX_VERT bit 2 #GP; PEBS_ENABLE 03000401H (split_load_retired's metric bits,
;   the replay-tagging table) and MATRIX_VERT 1 read back as written.
; Part 5: perfmon2's Pentium 4 PEBS programming (replay_event, 1stL_cache_load_miss_retired):
;   MSR_CRU_ESCR2 = 12000208H (replay_event 09H, NBOGUS, T0_OS), MSR_IQ_CCCR4 = 0003B000H,
;   MSR_PEBS_MATRIX_VERT = 1 (loads), MSR_PEBS_ENABLE = 03000001H (1stL metric, UOP_TAG,
;   MY_THR), MSR_IQ_COUNTER4 = -2, DS: index back at buf, threshold buf + 40, reset -2.
;   The L1D model (8 KB, 4-way, 64-byte lines: the model's CPUID.2) sees data accesses only
;   while such a metric counts, so the lines of `cold` (64-byte aligned, never loaded before)
;   start missing:
;     mov eax, [esi]       line 0: an L1D miss, -1
;     mov ebx, [esi + 4]   line 0 again: a hit
;     P5: mov ecx, [esi + 64]   line 1: a miss, 0: the record, registers as P5 began: ECX =
;         the marker 1234ABCDH, not the loaded 0; linear IP = P5. It reaches the threshold:
;         the PMI follows P5 (frame EIP = P5's next instruction); IQ_COUNTER4 = -2 after.
; Part 6: split_load_retired and split_store_retired counted (no PEBS): MSR_PEBS_ENABLE =
;   01000400H (split metric, UOP_TAG), MATRIX_VERT = 3 (loads, stores), MSR_SAAT_ESCR1 =
;   08000408H (load_port_replay 04H, SPLIT_LD, T0_OS), MSR_SAAT_ESCR0 = 0A000408H
;   (store_port_replay 05H, SPLIT_ST, T0_OS), IQ_COUNTER5 with MSR_CRU_ESCR3 = replay_event
;   NBOGUS T0_OS. Into the 64-byte aligned `split`:
;     mov eax, [split + 62] (a 4-byte load over two lines: 1) | mov eax, [split + 60] (0)
;     | mov [split + 126], eax (a split store: 1) | mov [split + 64], eax (0)
;     | add [split + 190], eax (a split load and store: 2) | lock add [split + 254], eax
;     (locked: 0) | movzx eax, word [split + 319] (1)  = 5.
; Expected: status 1 under `--cpu=pentium4` and under westmere; QEMU TCG's default CPU is no
; Intel one: SKIP (status 77).
%include "rt.inc"
%include "debug32.inc"

%define IQ_COUNTER4     0x310
%define IQ_COUNTER5     0x311
%define IQ_CCCR4        0x370
%define IQ_CCCR5        0x371
%define RAT_ESCR0       0x3BC
%define CRU_ESCR2       0x3CC
%define CRU_ESCR3       0x3CD
%define PEBS_ENABLE     0x3F1
%define PEBS_MATRIX_VERT 0x3F2
%define ESCR_TAGLOADS_OS  0x04000408        ; uop_type, TAGLOADS, T0_OS
%define ESCR_TAGLDST_OS   0x04000C08        ; uop_type, TAGLOADS | TAGSTORES, T0_OS
%define ESCR_FRONTEND_OS  0x10000208        ; front_end_event, NBOGUS, T0_OS
%define ESCR_REPLAY_OS    0x12000208        ; replay_event, NBOGUS, T0_OS
%define SAAT_ESCR0      0x3AE
%define SAAT_ESCR1      0x3AF
%define CCCR_SEL5       0x0003B000          ; Enable, ESCR select 5, active thread 11B
%define CCCR_OVF        0x80000000
%define REC             40
%define V1              0x111
%define E0              0xE0E0E0E0
%define T0              0x70707070

main:
        SET_HANDLER 13, gp_handler
        ; Both checks need an Intel CPU (every vbts model is one): elsewhere (QEMU's default
        ; qemu64 says AuthenticAMD, family 0FH) SKIP.
        NETBURST_BRANCH "NetBurst PEBS: not a GenuineIntel CPU", netburst
        ; --- not NetBurst
        mov dword [gp_count], 0
        WRMSR32 PEBS_ENABLE, 0x03000000
        mov ecx, RAT_ESCR0
        rdmsr
        CHECK_EQ dword [gp_count], 2, "not NetBurst: WRMSR 3F1H, 03000000H (UOP_TAG, MY_THR) and RDMSR 3BCH (RAT ESCR) #GP"
        ret

netburst:
        PASS "CPUID.1 family 0FH: NetBurst PEBS"
        ; ---- part 1
        mov ecx, MSR_MISC_ENABLE
        rdmsr
        and eax, 1 << 12
        CHECK_EQ eax, 0, "IA32_MISC_ENABLE bit 12 clear: PEBS available"

        ; ---- part 2
        RAW_GATE32 PMI_VEC, raw_isr
        APIC_ENABLE
        mov dword [LVT_PERFMON], PMI_VEC
        mov eax, buf
        mov [ds_area + 0x10], eax               ; PEBS buffer base
        mov [ds_area + 0x14], eax               ; PEBS index
        add eax, 4 * REC
        mov [ds_area + 0x18], eax               ; absolute maximum
        sub eax, REC
        mov [ds_area + 0x1C], eax               ; interrupt threshold: the third record
        mov dword [ds_area + 0x20], -3          ; counter reset, 40 bits
        mov dword [ds_area + 0x24], 0xFF
        WRMSR32 MSR_DS_AREA, ds_area
        WRMSR32 RAT_ESCR0, ESCR_TAGLOADS_OS
        WRMSR32 CRU_ESCR2, ESCR_FRONTEND_OS
        mov ecx, IQ_COUNTER4
        mov eax, -4
        mov edx, 0xFF
        wrmsr
        WRMSR32 PEBS_ENABLE, 0x03000000
        mov [loop_esp], esp
        mov esi, data
        xor ebx, ebx
        mov edi, 0xD1D1D1D1
        mov ebp, 0xB0B0B0B0
        sti
        mov ecx, IQ_CCCR4
        mov eax, CCCR_SEL5
        xor edx, edx
        wrmsr                                   ; counting from here (it loads nothing)
        mov edx, E0
        mov ecx, 10
L:      mov eax, [esi]
L_next: add ebx, eax
        lock inc dword [cnt]
        xchg edx, [tmp]
        add esi, 4
        dec ecx
        jnz L
        cli
        CHECK_EQ dword [isr_count], 1, "one PMI: the third record reached the threshold"
        CHECK_EQ dword [isr_eip], L_next, "PMI after L of iteration 10 (frame EIP = L's next instruction)"
        CHECK_EQ dword [ds_area + 0x14], buf + 3 * REC, "PEBS index = base + 3 records (120)"
        CHECK_EQ dword [cnt], 10, "the locked increments ran: cnt = 10"
        mov ecx, IQ_COUNTER4
        rdmsr
        mov [lo], eax
        mov [hi], edx
        CHECK_EQ dword [lo], -3, "IQ_COUNTER4 = the DS counter reset after the last record: FFFFFFFDH"
        CHECK_EQ dword [hi], 0xFF, "IQ_COUNTER4 bits 39:32 = 0FFH"
        CHECK_EQ dword [isr_cccr], CCCR_SEL5 | CCCR_OVF, "IQ_CCCR4 in the handler: OVF set (8003B000H)"
        ; the records
        mov dword [rec_ok], 0
        mov edi, buf
        mov dword [kk], 4
.rec:   call check_record
        add edi, REC
        add dword [kk], 3
        cmp dword [kk], 10
        jbe .rec
        CHECK_EQ dword [rec_ok], 3, "3 records: EFLAGS 202H, IP = L, EAX..ESP as L of iterations 4, 7, 10 began"
        CHECK_EQ dword [buf + 0x04], L, "record 1 linear IP = L (fault-like: the loading instruction)"
        CHECK_EQ dword [buf + 0x08], 3 * V1, "record 1 EAX = 333H (the load's destination before it ran)"
        CHECK_EQ dword [buf + 3 * REC], 0, "no fourth record"
        WRMSR32 PEBS_ENABLE, 0
        WRMSR32 IQ_CCCR4, 0

        ; ---- part 3
        WRMSR32 RAT_ESCR0, ESCR_TAGLDST_OS
        WRMSR32 CRU_ESCR3, ESCR_FRONTEND_OS
        WRMSR32 IQ_COUNTER5, 0
        mov esi, data
        mov edi, scratch
        WRMSR32 IQ_CCCR5, CCCR_SEL5             ; its wrmsr: 0
        mov ecx, 100
.l3:    mov eax, [esi]                          ; 1
        mov [edi], eax                          ; 1
        add [edi], eax                          ; 2
        lock add [edi], eax                     ; 0
        push eax                                ; 1
        pop eax                                 ; 1
        call leaf                               ; 1 (and RET: 0)
        dec ecx
        jnz .l3
        WRMSR32 IQ_CCCR5, 0
        mov ecx, IQ_COUNTER5
        rdmsr
        CHECK_EQ eax, 700, "front_end_event, loads and stores tagged: 7 an iteration, 700"

        ; ---- part 4
        mov dword [gp_count], 0
        WRMSR32 PEBS_ENABLE, 1 << 26
        WRMSR32 PEBS_ENABLE, 1 << 23
        WRMSR32 PEBS_MATRIX_VERT, 1 << 2
        CHECK_EQ dword [gp_count], 3, "PEBS_ENABLE bits 26 (OTH_THR) and 23, MATRIX_VERT bit 2: #GP"
        WRMSR32 PEBS_ENABLE, 0x03000401
        WRMSR32 PEBS_MATRIX_VERT, 1
        mov ecx, PEBS_ENABLE
        rdmsr
        CHECK_EQ eax, 0x03000401, "PEBS_ENABLE reads back 03000401H"
        mov ecx, PEBS_MATRIX_VERT
        rdmsr
        CHECK_EQ eax, 1, "PEBS_MATRIX_VERT reads back 1"
        WRMSR32 PEBS_ENABLE, 0

        ; ---- part 5
        mov dword [isr_count], 0
        mov dword [ds_area + 0x14], buf         ; index back at the base
        mov dword [ds_area + 0x1C], buf + REC   ; threshold: the first record
        mov dword [ds_area + 0x20], -2          ; counter reset
        mov edi, buf                            ; clear the records of part 2
        mov ecx, 5 * REC / 4
        xor eax, eax
        rep stosd
        WRMSR32 CRU_ESCR2, ESCR_REPLAY_OS
        WRMSR32 PEBS_MATRIX_VERT, 1
        WRMSR32 PEBS_ENABLE, 0x03000001
        mov ecx, IQ_COUNTER4
        mov eax, -2
        mov edx, 0xFF
        wrmsr
        mov esi, cold
        mov ecx, IQ_CCCR4
        mov eax, CCCR_SEL5
        xor edx, edx
        sti
        wrmsr                                   ; counting L1D-missing loads from here
        mov ecx, 0x1234ABCD
        mov eax, [esi]                          ; a miss: -1
        mov ebx, [esi + 4]                      ; a hit
P5:     mov ecx, [esi + 64]                     ; a miss: the record
P5_next: nop
        cli
        CHECK_EQ dword [isr_count], 1, "1stL_cache_load_miss_retired: one PMI"
        CHECK_EQ dword [isr_eip], P5_next, "the PMI follows the second L1D-missing load (frame EIP)"
        CHECK_EQ dword [ds_area + 0x14], buf + REC, "one record"
        CHECK_EQ dword [buf + 0x04], P5, "record IP = the second L1D-missing load (perfmon2's replay_event metric)"
        CHECK_EQ dword [buf + 0x10], 0x1234ABCD, "record ECX = the marker: the registers before the load"
        CHECK_EQ dword [buf + 0x18], cold, "record ESI = cold"
        mov ecx, IQ_COUNTER4
        rdmsr
        CHECK_EQ eax, -2, "IQ_COUNTER4 = the reset value -2"
        WRMSR32 PEBS_ENABLE, 0
        WRMSR32 IQ_CCCR4, 0

        ; ---- part 6
        WRMSR32 PEBS_ENABLE, 0x01000400
        WRMSR32 PEBS_MATRIX_VERT, 3
        WRMSR32 SAAT_ESCR1, 0x08000408
        WRMSR32 SAAT_ESCR0, 0x0A000408
        WRMSR32 CRU_ESCR3, ESCR_REPLAY_OS
        WRMSR32 IQ_COUNTER5, 0
        WRMSR32 IQ_CCCR5, CCCR_SEL5
        mov eax, [split + 62]                   ; 1
        mov eax, [split + 60]                   ; 0
        mov [split + 126], eax                  ; 1
        mov [split + 64], eax                   ; 0
        add [split + 190], eax                  ; 2
        lock add [split + 254], eax             ; 0
        movzx eax, word [split + 319]           ; 1
        WRMSR32 IQ_CCCR5, 0
        mov ecx, IQ_COUNTER5
        rdmsr
        CHECK_EQ eax, 5, "split_load_retired + split_store_retired: 5 split loads and stores"
        WRMSR32 PEBS_ENABLE, 0
        ret

leaf:
        ret

; edi = record, [kk] = k: the registers before L of iteration k (header).
check_record:
        mov eax, [kk]
        dec eax                                 ; k - 1
        cmp dword [edi + 0x00], 0x202
        jne .bad
        cmp dword [edi + 0x04], L
        jne .bad
        imul ebx, eax, V1
        cmp [edi + 0x08], ebx                   ; EAX = 111H (k-1)
        jne .bad
        mov ebx, eax
        imul ebx, [kk]
        shr ebx, 1
        imul ebx, ebx, V1
        cmp [edi + 0x0C], ebx                   ; EBX = 111H (k-1)k/2
        jne .bad
        mov ebx, 11
        sub ebx, [kk]
        cmp [edi + 0x10], ebx                   ; ECX = 11 - k
        jne .bad
        mov ebx, E0
        test eax, 1
        jz .even
        mov ebx, T0
.even:  cmp [edi + 0x14], ebx                   ; EDX
        jne .bad
        lea ebx, [data + 4 * eax]
        cmp [edi + 0x18], ebx                   ; ESI
        jne .bad
        cmp dword [edi + 0x1C], 0xD1D1D1D1      ; EDI
        jne .bad
        cmp dword [edi + 0x20], 0xB0B0B0B0      ; EBP
        jne .bad
        mov ebx, [loop_esp]
        cmp [edi + 0x24], ebx                   ; ESP
        jne .bad
        inc dword [rec_ok]
.bad:   ret

; The PMI (vector 0x50): the handler stops the counter before it loads anything.
        NB_PMI_STOP_HANDLER IQ_CCCR4
        GP_SKIP_HANDLER

section .data
align 4
lo:             dd 0
hi:             dd 0
cnt:            dd 0
tmp:            dd T0
kk:             dd 0
rec_ok:         dd 0
loop_esp:       dd 0
scratch:        dd 0
data:           dd V1, 2 * V1, 3 * V1, 4 * V1, 5 * V1, 6 * V1, 7 * V1, 8 * V1, 9 * V1, 10 * V1
align 64
ds_area:        times 0x30 db 0
align 64
buf:            times 5 * REC db 0
align 64
cold:           times 128 db 0
split:          times 320 db 0

%include "end.inc"
