; pebs_adaptive: adaptive PEBS, record format 4 (SDM vol. 3B 18.9.2 "Adaptive PEBS": MSR_PEBS_DATA_CFG
; 3F2H, the record groups and their sizes, the Adaptive_Record bits, PEBS on fixed counters), 32-bit
; ring 0. Needs CPUID.1 DS + DTES64 + PDCM, MISC_ENABLE[12] clear, perfmon v4+ (CTR_FRZ), and
; IA32_PERF_CAPABILITIES with record format 4 ([11:8]) and PEBS_BASELINE (bit 14); otherwise SKIP.
; Setup: CR4.OSFXSR (SSE), XMM0 = 00 01 .. 0F, XMM7 = 70 71 .. 7F; DS save area (64-bit format)
; with BTS off, the PEBS buffer: base = index, absolute maximum base + 300H, interrupt threshold
; base + 220H, reset values 0 (PMC1 at 48H, FIXED_CTR0 at 80H). PEBS_DATA_CFG = 0100000FH: memory
; info (0), GPRs (1), XMMs (2), LBRs (3), 2 LBR entries ([31:24] = 1).
;   PMC1: INST_RETIRED.ALL (C0H/01H) USR|OS|EN + Adaptive_Record (bit 34), from 2^48 - 1.
;   FIXED_CTR0 (instructions): OS|USR, no PMI, no Adaptive_Record, from 2^48 - 4.
;   PEBS_ENABLE = bit 1 (PMC1) | bit 32 (FIXED_CTR0); DEBUGCTL = LBR | FREEZE_PERFMON_ON_PMI;
;   LVT perfmon -> vector 0x50.
; Derivation (records are trap-like, PERF_CAPABILITIES bit 6; a WRMSR retires under the
; configuration it leaves, docs/pmu-model.md):
;  - jb0 `jmp lb1` and jb1 `jmp lb2` are the last two branches into the LBRs before counting starts;
;  - the WRMSR of GLOBAL_CTRL = bit 1 | bit 32 (at `en`) is counted: PMC1 wraps to 0 (armed),
;    FIXED_CTR0 -> 2^48 - 3;
;  - i1 `mov eax, 1` is PMC1's next event: record 1 (adaptive, 20H + 20H + 90H + 100H + 2 x 18H
;    = 200H bytes): [47:0] = 0100000FH, [63:48] = 200H; eventing IP i1; applicable counters
;    bit 1; TSC between two RDTSCs around the run; memory info 0; GPRs: RFLAGS as saved before
;    `en`, RIP = i2, EAX = 1, ECX = 38FH, EDX = 1 (the WRMSR's), EBX/ESP/EBP/ESI/EDI as set,
;    R8-R15 0 (not IA-32e mode); XMM0 and XMM7 as set, XMM8-15 0; LBR entry 0 = (jb1, lb2),
;    entry 1 = (jb0, lb1), INFO 0. PMC1 is reloaded with 0 (then counts i1 .. i4: see below).
;    FIXED_CTR0 -> 2^48 - 2. Index = base + 200H < threshold: no PMI.
;  - i2 -> 2^48 - 1, i3 wraps FIXED_CTR0 (armed), i4 is its next event: record 2, the basic group
;    only (FIXED_CTR0 has no Adaptive_Record bit): [63:48] = 20H, format 0, eventing IP i4,
;    applicable counters bit 32. FIXED_CTR0 reloaded with 0. Index = base + 220H = threshold: PMI
;    with GLOBAL_STATUS.OvfBuffer (62), delivered before i5 (frame EIP = i5); FREEZE_PERFMON_ON_PMI
;    sets CTR_FRZ (59, perfmon v4+): nothing after i4 counts. PMC1 = 3 (i2, i3, i4 after its
;    reload at i1), FIXED_CTR0 = 0.
; Expected: status 1 under vbts --cpu=icelake-server; SKIP elsewhere (QEMU TCG: 155).
%include "rt.inc"
%include "debug32.inc"


main:
        mov eax, 1
        call dbg_cpuid32
        test edx, 1 << 21               ; DS
        jz .skip
        and ecx, (1 << 2) | (1 << 15)   ; DTES64, PDCM
        cmp ecx, (1 << 2) | (1 << 15)
        jne .skip
        mov ecx, MSR_MISC_ENABLE
        rdmsr
        test eax, 1 << 12               ; PEBS unavailable
        jnz .skip
        mov eax, 0xA
        call dbg_cpuid32
        cmp al, 4
        jb .skip
        mov ecx, 0x345
        rdmsr
        mov edx, eax
        shr edx, 8
        and edx, 0xF
        cmp edx, 4
        jb .skip
        test eax, 1 << 14               ; PEBS_BASELINE
        jz .skip
        jmp setup
.skip:
        SKIP "PEBS: adaptive PEBS needs DS, DTES64, PDCM, record format 4 with PEBS_BASELINE and perfmon v4"
        ret

setup:
        mov eax, cr4
        or eax, 1 << 9                  ; OSFXSR
        mov cr4, eax
        movdqu xmm0, [pat0]
        movdqu xmm7, [pat7]
        SET_HANDLER PMI_VEC, pmi_handler
        APIC_ENABLE
        mov dword [LVT_PERFMON], PMI_VEC
        mov eax, pebs_buffer
        mov [ds_area + 0x20], eax       ; PEBS base
        mov [ds_area + 0x28], eax       ; index
        lea edx, [eax + 0x300]
        mov [ds_area + 0x30], edx       ; absolute maximum
        lea edx, [eax + 0x220]
        mov [ds_area + 0x38], edx       ; interrupt threshold: after records 1 and 2
        WRMSR32 MSR_DS_AREA, ds_area
        WRMSR32 0x38F, 0
        mov ecx, 0x3F2                  ; PEBS_DATA_CFG
        mov eax, 0x0100000F
        xor edx, edx
        wrmsr
        rdmsr
        CHECK_EQ eax, 0x0100000F, "PEBS_DATA_CFG reads back 0100000FH"
        WRMSR32 0xC2, 0xFFFFFFFF        ; PMC1 = 2^48 - 1 (sign-extended)
        mov ecx, 0x187                  ; PERFEVTSEL1: C0H/01H, USR, OS, EN, Adaptive_Record (34)
        mov eax, 0xC0 | (0x01 << 8) | (1 << 16) | (1 << 17) | (1 << 22)
        mov edx, 1 << (34 - 32)
        wrmsr
        mov ecx, 0x309                  ; FIXED_CTR0 = 2^48 - 4
        mov eax, 0xFFFFFFFC
        mov edx, 0xFFFF
        wrmsr
        WRMSR32 0x38D, 0x3              ; FIXED_CTR_CTRL: counter 0 OS|USR
        mov ecx, 0x3F1                  ; PEBS_ENABLE: PMC1, FIXED_CTR0 (32)
        mov eax, 1 << 1
        mov edx, 1
        wrmsr
        rdtsc
        mov [tsc_before], eax
        mov [tsc_before + 4], edx
        WRMSR32 MSR_DEBUGCTL, (1 << 0) | (1 << 12)   ; LBR, FREEZE_PERFMON_ON_PMI
        mov ebx, 0xB0B0
        mov esi, 0x5151
        mov edi, 0xD1D1
        mov ebp, 0xBBBB
        mov [esp_at], esp
        sti
jb0:    jmp lb1
lb1:
jb1:    jmp lb2
lb2:    pushfd
        pop dword [flags_at]
        mov ecx, 0x38F
        mov eax, 1 << 1
        mov edx, 1
en:     wrmsr                           ; GLOBAL_CTRL: PMC1, FIXED_CTR0; counted: PMC1 wraps
i1:     mov eax, 1
i2:     mov eax, 2
i3:     mov eax, 3
i4:     mov eax, 4
i5:     mov eax, 5
i6:     mov eax, 6
        cli
        WRMSR32 MSR_DEBUGCTL, 0
        rdtsc
        mov [tsc_after], eax
        mov [tsc_after + 4], edx
        WRMSR32 0x38F, 0
        WRMSR32 0x3F1, 0
        call dump
        mov eax, [ds_area + 0x28]
        sub eax, pebs_buffer
        CHECK_EQ eax, 0x220, "PEBS index = base + 220H (a 200H record and a 20H record)"
        CHECK_EQ dword [pmi_count], 1, "one PMI: the index reached the threshold with record 2"
        CHECK_EQ dword [pmi_eip], i5, "PMI frame EIP = i5 (after record 2's instruction i4)"
        mov eax, [pmi_status_hi]
        and eax, (1 << (62 - 32)) | (1 << (59 - 32))
        CHECK_EQ eax, (1 << (62 - 32)) | (1 << (59 - 32)), "PMI: GLOBAL_STATUS OvfBuffer (62) and CTR_FRZ (59)"
        mov esi, pebs_buffer
        ; record 1: basic group
        CHECK_EQ dword [esi + 0x00], 0x0100000F, "record 1: record format = PEBS_DATA_CFG 0100000FH"
        CHECK_EQ dword [esi + 0x04], 0x200 << 16, "record 1: record size [63:48] = 200H"
        CHECK_EQ dword [esi + 0x08], i1, "record 1: eventing IP = i1"
        CHECK_EQ dword [esi + 0x10], 1 << 1, "record 1: applicable counters = PMC1"
        CHECK_EQ dword [esi + 0x14], 0, "record 1: applicable counters [63:32] = 0"
        mov eax, [esi + 0x18]
        mov edx, [esi + 0x1C]
        sub eax, [tsc_before]
        sbb edx, [tsc_before + 4]
        shr edx, 31
        CHECK_EQ edx, 0, "record 1: TSC >= the RDTSC before counting"
        mov eax, [tsc_after]
        mov edx, [tsc_after + 4]
        sub eax, [esi + 0x18]
        sbb edx, [esi + 0x1C]
        shr edx, 31
        CHECK_EQ edx, 0, "record 1: TSC <= the RDTSC after the run"
        ; memory info group (20H-3FH): no memory event: 0
        mov eax, [esi + 0x20]
        or eax, [esi + 0x28]
        or eax, [esi + 0x30]
        or eax, [esi + 0x38]
        CHECK_EQ eax, 0, "record 1: memory info group 0 (address, source, latency, TSX)"
        ; GPR group (40H-CFH)
        mov eax, [flags_at]
        CHECK_EQ dword [esi + 0x40], eax, "record 1: GPRs: RFLAGS at 40H as before the WRMSR"
        CHECK_EQ dword [esi + 0x48], i2, "record 1: GPRs: RIP at 48H = i2 (after the event i1)"
        CHECK_EQ dword [esi + 0x50], 1, "record 1: GPRs: RAX at 50H = 1 (after i1)"
        CHECK_EQ dword [esi + 0x58], 0x38F, "record 1: GPRs: RCX at 58H = 38FH"
        CHECK_EQ dword [esi + 0x60], 1, "record 1: GPRs: RDX at 60H = 1"
        CHECK_EQ dword [esi + 0x68], 0xB0B0, "record 1: GPRs: RBX at 68H"
        mov eax, [esp_at]
        CHECK_EQ dword [esi + 0x70], eax, "record 1: GPRs: RSP at 70H"
        CHECK_EQ dword [esi + 0x78], 0xBBBB, "record 1: GPRs: RBP at 78H"
        CHECK_EQ dword [esi + 0x80], 0x5151, "record 1: GPRs: RSI at 80H"
        CHECK_EQ dword [esi + 0x88], 0xD1D1, "record 1: GPRs: RDI at 88H"
        CHECK_EQ dword [esi + 0x8C], 0, "record 1: GPRs: RDI [63:32] = 0 (not IA-32e mode)"
        CHECK_EQ dword [esi + 0x90], 0, "record 1: GPRs: R8 at 90H = 0 (not IA-32e mode)"
        ; XMM group (D0H-1CFH)
        CHECK_EQ dword [esi + 0xD0], 0x03020100, "record 1: XMM0 [31:0] at D0H"
        CHECK_EQ dword [esi + 0xDC], 0x0F0E0D0C, "record 1: XMM0 [127:96] at DCH"
        CHECK_EQ dword [esi + 0x140], 0x73727170, "record 1: XMM7 [31:0] at 140H"
        CHECK_EQ dword [esi + 0x150], 0, "record 1: XMM8 at 150H = 0 (not IA-32e mode)"
        ; LBR group (1D0H-1FFH): entry 0 the latest branch
        CHECK_EQ dword [esi + 0x1D0], jb1, "record 1: LBR entry 0 FROM = jb1"
        CHECK_EQ dword [esi + 0x1D8], lb2, "record 1: LBR entry 0 TO = lb2"
        CHECK_EQ dword [esi + 0x1E0], 0, "record 1: LBR entry 0 INFO = 0"
        CHECK_EQ dword [esi + 0x1E8], jb0, "record 1: LBR entry 1 FROM = jb0"
        CHECK_EQ dword [esi + 0x1F0], lb1, "record 1: LBR entry 1 TO = lb1"
        ; record 2: the basic group alone
        add esi, 0x200
        CHECK_EQ dword [esi + 0x00], 0, "record 2: record format 0 (FIXED_CTR0 has no Adaptive_Record)"
        CHECK_EQ dword [esi + 0x04], 0x20 << 16, "record 2: record size 20H (basic group only)"
        CHECK_EQ dword [esi + 0x08], i4, "record 2: eventing IP = i4"
        CHECK_EQ dword [esi + 0x10], 0, "record 2: applicable counters [31:0] = 0"
        CHECK_EQ dword [esi + 0x14], 1, "record 2: applicable counters = FIXED_CTR0 (bit 32)"
        CHECK_EQ dword [esi + 0x20], 0, "record 2: nothing after it"
        ; counters
        mov ecx, 0xC2
        rdmsr
        CHECK_EQ eax, 3, "PMC1 = 3 (reloaded to 0 by record 1, then i2-i4; frozen by the PMI)"
        mov ecx, 0x309
        rdmsr
        CHECK_EQ eax, 0, "FIXED_CTR0 = 0 (reloaded by record 2; frozen)"
        ret

dump:
        pushad
        PRINT "PEBS: index="
        mov eax, [ds_area + 0x28]
        PRINT_HEX32
        PRINT " rec1.ip="
        mov eax, [pebs_buffer + 0x08]
        PRINT_HEX32
        PRINT " rec1.size/format="
        mov edx, [pebs_buffer + 0x04]
        mov eax, [pebs_buffer + 0x00]
        PRINT_HEX64
        NEWLINE
        popad
        ret

; ebx = frame
pmi_handler:
        inc dword [pmi_count]
        mov eax, [ebx + F32_EIP]
        mov [pmi_eip], eax
        mov ecx, 0x38E
        rdmsr
        mov [pmi_status_hi], edx
        mov ecx, 0x390                  ; clear OvfBuffer only: CTR_FRZ keeps the counters frozen
        xor eax, eax
        mov edx, 1 << (62 - 32)
        wrmsr
        and dword [LVT_PERFMON], ~(1 << 16)
        APIC_EOI
        ret

section .data
align 16
pat0:           db 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F
pat7:           db 0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7A, 0x7B, 0x7C, 0x7D, 0x7E, 0x7F
align 8
tsc_before:     dq 0
tsc_after:      dq 0
pmi_count:      dd 0
pmi_eip:        dd 0
pmi_status_hi:  dd 0
esp_at:         dd 0
flags_at:       dd 0
align 64
ds_area:        times 0xA0 db 0
align 64
pebs_buffer:    times 0x300 db 0

%include "end.inc"
