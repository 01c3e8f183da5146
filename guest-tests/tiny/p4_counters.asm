; p4_counters: NetBurst's own performance counters (SDM vol. 3B, "Performance Monitoring
; (Processors Based on Intel NetBurst Microarchitecture)"; docs/pmu-model.md, "NetBurst
; performance counters"), programmed as a Pentium 4 driver would: an ESCR selects the event,
; the counter is preset, the CCCR picks the ESCR and enables counting. 32-bit ring 0, no
; paging, LVT perfmon = vector 0x50.
;
; Which CPU: CPUID.1 family 0FH (NetBurst). On any other family (westmere: architectural
; perfmon, SDM 18.2) 300H-311H, 360H-371H and 3A0H-3E1H are not performance-monitoring MSRs
; (309H-30BH are IA32_FIXED_CTR0-2 there, and read normally): the image checks that RDMSR
; and WRMSR of MSR_BPU_COUNTER0 (300H), MSR_IQ_CCCR0 (36CH) and MSR_CRU_ESCR0 (3B8H) each
; #GP (6 faults) and stops there.
;
; NetBurst, part 1: instr_retired on MSR_IQ_COUNTER0 (30CH, counter 12) from -5.
;   MSR_CRU_ESCR0 (3B8H) = 04000208H: event select 02H (bits 30:25), event mask NBOGUSNTAG
;   (bit 9), T0_OS (bit 3). MSR_IQ_CCCR0 (36CH) = 04039000H: Enable (12), ESCR select 4
;   (CRU_ESCR0, bits 15:13), active thread 11B (17:16), OVF_PMI (26).
;   The counter is 40 bits: -5 = FF_FFFF_FFFBH (EDX = 0FFH, EAX = FFFFFFFBH).
;   Counted at CPL 0, one per retired instruction (nothing is bogus or tagged under vbts):
;     w wrmsr (enables the counter; it retires under the configuration it leaves: 1 -> -4)
;     | p1 nop (-3) | p2 add (-2) | p3 nop (-1) | p4 jmp p5 (0: overflow, CCCR.OVF set)
;     | p5 nop (1): "the PMI is generated on the next event count after the counter has
;     overflowed" (the CCCR's OVF_PMI flag): the PMI follows p5, frame EIP = p6.
;   The interrupt delivery is no instruction; the raw handler's first instructions count
;   until its WRMSR clears Enable (that WRMSR itself does not count: it retires disabled):
;     push eax (2) | push ecx (3) | push edx (4) | mov ecx (5) | rdmsr (6) | mov [isr_cccr] (7)
;     | and eax (8) | wrmsr (disables). Counter = 8; the CCCR read in the handler is
;     04039000H | OVF (bit 31) = 84039000H.
; NetBurst, part 2: branch_retired (event 06H) on MSR_CRU_ESCR2 (3CCH, feeds counters 12,
;   13, 16) and MSR_CRU_ESCR3 (3CDH, feeds 14, 15, 17), CCCR ESCR select 5:
;   IQ_COUNTER1 (30DH, counter 13): mask MMNP | MMTP (bits 9, 11) = 0C000A08H, every branch;
;   IQ_COUNTER2 (30EH, counter 14): mask MMTP (bit 11) = 0C000808H, taken branches only.
;   vbts predicts every branch: the mispredicted bits MMNM/MMTM would count nothing.
;   Workload: je (not taken) | jmp (taken) | dec/jnz x3 (taken, taken, not taken) | call
;   (taken) | ret (taken): 7 branches, 5 taken. Counter 13 = 7, counter 14 = 5.
; NetBurst, part 3: a long run (block-level counting on both engines, docs/tracing.md):
;   IQ_COUNTER3 (30FH, counter 15) with MSR_CRU_ESCR1 (3B9H, feeds 14, 15, 17; select 4),
;   instr_retired at CPL 0, from 0: the enabling wrmsr (1), mov ebx (2), 1000 x (dec, jnz)
;   (2002), then WRMSR32's mov ecx, mov eax, xor edx (2005); its wrmsr disables: 2005.
; NetBurst, part 4: MSR rules: MSR_IQ_ESCR0 (3BAH, models 01H-02H only) and the gap 3C6H #GP;
;   a reserved ESCR bit (31) and a reserved CCCR bit (0) #GP; bits 63:40 of a counter write
;   are dropped (EDX = FFFFFFFFH reads back as 0FFH).
; Expected: status 1 under `--cpu=pentium4` and under westmere (each checks its own CPU);
; QEMU TCG's default CPU is no Intel one: SKIP (status 77).
%include "rt.inc"
%include "debug32.inc"

%define IQ_COUNTER0     0x30C
%define IQ_COUNTER1     0x30D
%define IQ_COUNTER2     0x30E
%define IQ_CCCR0        0x36C
%define IQ_CCCR1        0x36D
%define IQ_CCCR2        0x36E
%define CRU_ESCR0       0x3B8
%define CRU_ESCR2       0x3CC
%define CRU_ESCR3       0x3CD
%define ESCR_INSTR_OS   0x04000208          ; instr_retired, NBOGUSNTAG, T0_OS
%define ESCR_BR_ALL_OS  0x0C000A08          ; branch_retired, MMNP | MMTP, T0_OS
%define ESCR_BR_TKN_OS  0x0C000808          ; branch_retired, MMTP, T0_OS
%define CCCR_SEL4_PMI   0x04039000          ; Enable, ESCR select 4, active thread 11B, OVF_PMI
%define CCCR_SEL5       0x0003B000          ; Enable, ESCR select 5, active thread 11B
%define CCCR_OVF        0x80000000

main:
        SET_HANDLER 13, gp_handler
        ; Both checks need an Intel CPU (every vbts model is one): elsewhere (QEMU's default
        ; qemu64 says AuthenticAMD, family 0FH) SKIP.
        NETBURST_BRANCH "NetBurst counters: not a GenuineIntel CPU", netburst
        ; --- not NetBurst: the NetBurst MSRs do not exist
        mov dword [gp_count], 0
        mov ecx, 0x300
        rdmsr
        WRMSR32 0x300, 0
        mov ecx, IQ_CCCR0
        rdmsr
        WRMSR32 IQ_CCCR0, CCCR_SEL4_PMI
        mov ecx, CRU_ESCR0
        rdmsr
        WRMSR32 CRU_ESCR0, ESCR_INSTR_OS
        CHECK_EQ dword [gp_count], 6, "not NetBurst: RDMSR/WRMSR of 300H, 36CH, 3B8H (NetBurst counter, CCCR, ESCR) #GP"
        ret

netburst:
        PASS "CPUID.1 family 0FH: NetBurst performance counters"
        RAW_GATE32 PMI_VEC, raw_isr
        APIC_ENABLE
        mov dword [LVT_PERFMON], PMI_VEC
        ; ---- part 1
        WRMSR32 CRU_ESCR0, ESCR_INSTR_OS
        mov ecx, IQ_COUNTER0
        mov eax, -5
        mov edx, 0xFF
        wrmsr
        mov ecx, IQ_COUNTER0
        rdmsr
        mov [lo], eax
        mov [hi], edx
        CHECK_EQ dword [hi], 0xFF, "IQ_COUNTER0 = -5 in 40 bits: EDX = 0FFH"
        CHECK_EQ dword [lo], -5, "IQ_COUNTER0 = -5 in 40 bits: EAX = FFFFFFFBH"
        sti
        mov ecx, IQ_CCCR0
        mov eax, CCCR_SEL4_PMI
        xor edx, edx
w:      wrmsr                                   ; counted: -4
p1:     nop                                     ; -3
p2:     add eax, 1                              ; -2
p3:     nop                                     ; -1
p4:     jmp p5                                  ; 0: overflow
p5:     nop                                     ; 1: the next event, PMI
p6:     nop
p7:     cli
        CHECK_EQ dword [isr_count], 1, "one PMI"
        CHECK_EQ dword [isr_eip], p6, "PMI on the event after the overflow (frame EIP = p6)"
        CHECK_EQ dword [isr_cccr], CCCR_SEL4_PMI | CCCR_OVF, "IQ_CCCR0 in the handler: OVF set (84039000H)"
        mov ecx, IQ_COUNTER0
        rdmsr
        mov [lo], eax
        mov [hi], edx
        CHECK_EQ dword [lo], 8, "IQ_COUNTER0 = 8: p5 and the handler's 7 instructions before its disabling WRMSR"
        CHECK_EQ dword [hi], 0, "IQ_COUNTER0 bits 39:32 = 0"
        mov ecx, IQ_CCCR0
        rdmsr
        CHECK_EQ eax, (CCCR_SEL4_PMI | CCCR_OVF) & ~(1 << 12), "IQ_CCCR0 disabled, OVF sticky"

        ; ---- part 2
        WRMSR32 IQ_CCCR0, 0
        WRMSR32 CRU_ESCR2, ESCR_BR_ALL_OS
        WRMSR32 CRU_ESCR3, ESCR_BR_TKN_OS
        WRMSR32 IQ_COUNTER1, 0
        WRMSR32 IQ_COUNTER2, 0
        WRMSR32 IQ_CCCR1, CCCR_SEL5
        WRMSR32 IQ_CCCR2, CCCR_SEL5
        xor eax, eax
        cmp eax, 1
        je .b3                                  ; not taken
        jmp .b3                                 ; taken
.b3:    mov ecx, 3
.b4:    dec ecx
        jnz .b4                                 ; taken, taken, not taken
        call leaf                               ; taken (and its RET)
        WRMSR32 IQ_CCCR1, 0
        WRMSR32 IQ_CCCR2, 0
        mov ecx, IQ_COUNTER1
        rdmsr
        CHECK_EQ eax, 7, "branch_retired MMNP|MMTP = 7 (je, jmp, 3 jnz, call, ret)"
        mov ecx, IQ_COUNTER2
        rdmsr
        CHECK_EQ eax, 5, "branch_retired MMTP = 5 taken (jmp, 2 jnz, call, ret)"

        ; ---- part 3
        WRMSR32 0x3B9, ESCR_INSTR_OS            ; CRU_ESCR1
        WRMSR32 0x30F, 0                        ; IQ_COUNTER3
        mov ecx, 0x36F                          ; IQ_CCCR3
        mov eax, CCCR_SEL4_PMI & ~(1 << 26)
        xor edx, edx
        wrmsr                                   ; 1
        mov ebx, 1000                           ; 2
.l:     dec ebx
        jnz .l                                  ; 2002
        WRMSR32 0x36F, 0                        ; 2005 (its wrmsr disables)
        mov ecx, 0x30F
        rdmsr
        CHECK_EQ eax, 2005, "instr_retired over 1000 loop iterations = 2005"

        ; ---- part 4
        mov dword [gp_count], 0
        mov ecx, 0x3BA                          ; MSR_IQ_ESCR0: models 01H-02H only
        rdmsr
        mov ecx, 0x3C6                          ; no ESCR
        rdmsr
        WRMSR32 CRU_ESCR0, 0x80000000           ; ESCR bit 31 reserved
        WRMSR32 IQ_CCCR0, 1                     ; CCCR bit 0 reserved
        CHECK_EQ dword [gp_count], 4, "3BAH, 3C6H, ESCR bit 31, CCCR bit 0: #GP"
        mov ecx, IQ_COUNTER0
        mov eax, 0x12345678
        mov edx, 0xFFFFFFFF
        wrmsr
        rdmsr
        mov [lo], eax
        mov [hi], edx
        CHECK_EQ dword [hi], 0xFF, "counter write keeps bits 39:0 (EDX FFFFFFFFH -> 0FFH)"
        CHECK_EQ dword [lo], 0x12345678, "counter bits 31:0 as written"
        ret

leaf:
        ret

; The PMI (vector 0x50): NetBurst has no freeze-on-PMI, so the handler stops the counter
; first, with instructions counted as the header derives.
        NB_PMI_STOP_HANDLER IQ_CCCR0
        GP_SKIP_HANDLER

section .data
align 4
lo:             dd 0
hi:             dd 0

%include "end.inc"
