; pebs_adaptive_lm64: adaptive PEBS (record format 4, SDM vol. 3B 18.9.2 "Adaptive PEBS") in IA-32e
; mode, the 64-bit counterpart of pebs_adaptive.asm: 64-bit ring 0, the sampled code running at the
; high canonical alias RT_ALIAS (0xFFFFFFF8_10000000 + offset from 1 MiB; A(x) below). In IA-32e
; mode every GPR field holds the full 64-bit register, R8-R15 included, XMM8-XMM15 exist, and the
; instruction pointers and LBR addresses are 64-bit linear addresses.
; Needs CPUID.1 DS + DTES64 + PDCM, MISC_ENABLE[12] clear, perfmon v4+ (CTR_FRZ), and
; IA32_PERF_CAPABILITIES with record format 4 ([11:8]) and PEBS_BASELINE (bit 14); otherwise SKIP.
; Setup: CR4.OSFXSR; XMMi byte j = 16*i + j (XMM0 = 00..0F, .., XMM8 = 80..8F, .., XMM15 =
; F0..FF: the table xmm_pat); DS save area (64-bit format, A0H bytes) with BTS off, the PEBS
; buffer: base = index, absolute maximum base + 630H (three 210H records), interrupt threshold
; base + 420H (after two), reset values PMC4 (at 40H + 8*4 = 60H) 2^48 - 100H and FIXED_CTR0
; (at 80H) 100H.
; PEBS_DATA_CFG = 0300000EH: GPRs (1), XMMs (2), LBRs (3), no memory info (0), 4 LBR entries
; ([31:24] = 3): a record is 20H (basic) + 90H (GPRs) + 100H (XMMs) + 4 x 18H (LBRs) = 210H bytes,
; so the GPR group starts at 20H, the XMM group at B0H, the LBR group at 1B0H.
;   PMC4: INST_RETIRED.ALL (C0H/01H) USR|OS|EN + Adaptive_Record (bit 34), from 2^48 - 1 (A_PMC4
;   4C5H, full-width write).
;   FIXED_CTR0 (instructions): OS|USR, no PMI, Adaptive_Record (FIXED_CTR_CTRL bit 32), from
;   2^48 - 4.
;   PEBS_ENABLE = bit 4 (PMC4) | bit 32 (FIXED_CTR0); DEBUGCTL = LBR | FREEZE_PERFMON_ON_PMI;
;   LVT perfmon -> vector 0x50. RBX, RBP, RSI, RDI, R8-R15 = distinctive 64-bit values (below).
; Derivation (records are trap-like, PERF_CAPABILITIES bit 6; a WRMSR retires under the
; configuration it leaves, docs/pmu-model.md):
;  - with LBRs on, the branches before counting starts are cw `call rax` (to A(w)), then at the
;    alias jb0 `jmp lb0`, jb1 `jmp lb1`, jb2 `jmp lb2`;
;  - the WRMSR of GLOBAL_CTRL = bit 4 | bit 32 (at A(en)) is counted: PMC4 wraps to 0 (armed),
;    FIXED_CTR0 -> 2^48 - 3; it leaves RCX = 38FH, RDX = 1;
;  - i1 `mov rax, 0xA1A1..A1` is PMC4's next event: record 1 (adaptive: [47:0] = 0300000EH,
;    [63:48] = 210H); eventing IP A(i1); applicable counters bit 4; TSC between two RDTSCs around
;    the run; GPRs: RFLAGS as saved at A(lb2), RIP = A(i2), RAX = 0xA1A1..A1, RCX = 38FH, RDX = 1,
;    RBX/RBP/RSI/RDI/R8-R15 as set, RSP = the RSP before the call - 8; XMM0-15 = xmm_pat; LBR
;    entry 0 = (A(jb2), A(lb2)), 1 = (A(jb1), A(lb1)), 2 = (A(jb0), A(lb0)), 3 = (cw, A(w)),
;    INFO 0. PMC4 is reloaded with 2^48 - 100H; FIXED_CTR0 -> 2^48 - 2. Index = base + 210H:
;    below the threshold, no PMI;
;  - i2 `lea r8, [r8 + 1]` (PMC4 2^48 - FFH, FIXED_CTR0 2^48 - 1), i3 `not r15` (PMC4
;    2^48 - FEH; FIXED_CTR0 wraps: armed; neither changes RFLAGS);
;  - i4 `jmp t4` is FIXED_CTR0's next event (PMC4 2^48 - FDH): record 2, adaptive too (FIXED_CTR0's
;    Adaptive_Record): 210H bytes, format 0300000EH, eventing IP A(i4), applicable counters
;    bit 32 only; GPRs: RIP = A(t4) (the branch target), R8 = 0x80..09, R15 = 0x0F..F0, the rest
;    as in record 1; XMMs as in record 1; LBR entry 0 = (A(i4), A(t4)) (the eventing branch
;    itself), 1 = (A(jb2), A(lb2)), 2 = (A(jb1), A(lb1)), 3 = (A(jb0), A(lb0)). FIXED_CTR0 is
;    reloaded with 100H. Index = base + 420H = threshold: PMI with GLOBAL_STATUS.OvfBuffer (62),
;    delivered before t4 (frame RIP = A(t4)); FREEZE_PERFMON_ON_PMI sets CTR_FRZ (59, perfmon
;    v4+): nothing after i4 counts. GLOBAL_STATUS in the handler = bits 62 | 59 (the overflow
;    bits 4 and 32 were cleared by the assists). PMC4 = 2^48 - FDH, FIXED_CTR0 = 100H.
; Expected: status 1 under vbts --cpu=icelake-server; SKIP elsewhere (QEMU TCG: 155).
%define RT_LONG_MODE 1
%include "rt.inc"
%include "debug64.inc"

%define ALIAS(x)        ((x) - RT_LOAD_ADDR)        ; offset; the code adds RT_ALIAS at run time
%define DATA_CFG        0x0300000E
%define REC             0x210                       ; 20H + 90H + 100H + 4 * 18H
%define GPR             0x20                        ; GPR group offset
%define XMM             0xB0                        ; XMM group offset
%define LBR             0x1B0                       ; LBR group offset
%define PMC4_RESET      0x0000FFFFFFFFFF00          ; 2^48 - 100H
%define FIX0_RESET      0x100

%macro LOAD_A 2                         ; LOAD_A reg, label: reg = A(label) (clobbers RDX)
        mov %1, ALIAS(%2)
        mov rdx, RT_ALIAS
        add %1, rdx
%endmacro

main:
        mov eax, 1
        call pcpuid
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
        call pcpuid
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

pcpuid:                                 ; the image's one CPUID site
        push rbx
        cpuid
        pop rbx
        ret

setup:
        mov rax, cr4
        or eax, 1 << 9                  ; OSFXSR
        mov cr4, rax
%assign i 0
%rep 16
        movdqu xmm%[i], [xmm_pat + 16 * i]
%assign i i + 1
%endrep
        SET_HANDLER PMI_VEC, pmi_handler
        APIC_ENABLE
        mov edi, LVT_PERFMON            ; (a 64-bit absolute address needs a register)
        mov dword [rdi], PMI_VEC
        mov rax, pebs_buffer
        mov [ds_area + 0x20], rax       ; PEBS base
        mov [ds_area + 0x28], rax       ; index
        lea rdx, [rax + 3 * REC]
        mov [ds_area + 0x30], rdx       ; absolute maximum: three records
        lea rdx, [rax + 2 * REC]
        mov [ds_area + 0x38], rdx       ; interrupt threshold: after records 1 and 2
        mov rax, PMC4_RESET
        mov [ds_area + 0x40 + 8 * 4], rax
        mov qword [ds_area + 0x80], FIX0_RESET
        mov ecx, MSR_DS_AREA
        mov rax, ds_area
        mov rdx, rax
        shr rdx, 32
        wrmsr
        WRMSR64 0x38F, 0
        mov ecx, 0x3F2                  ; PEBS_DATA_CFG
        mov eax, DATA_CFG
        xor edx, edx
        wrmsr
        rdmsr
        shl rdx, 32
        or rax, rdx
        CHECK_EQ rax, DATA_CFG, "PEBS_DATA_CFG reads back 0300000EH"
        mov ecx, 0x4C5                  ; A_PMC4 = 2^48 - 1 (full-width write)
        mov eax, 0xFFFFFFFF
        mov edx, 0xFFFF
        wrmsr
        mov ecx, 0x18A                  ; PERFEVTSEL4: C0H/01H, USR, OS, EN, Adaptive_Record (34)
        mov eax, 0xC0 | (0x01 << 8) | (1 << 16) | (1 << 17) | (1 << 22)
        mov edx, 1 << (34 - 32)
        wrmsr
        mov ecx, 0x309                  ; FIXED_CTR0 = 2^48 - 4
        mov eax, 0xFFFFFFFC
        mov edx, 0xFFFF
        wrmsr
        mov ecx, 0x38D                  ; FIXED_CTR_CTRL: counter 0 OS|USR, Adaptive_Record (32)
        mov eax, 0x3
        mov edx, 1
        wrmsr
        rdmsr
        shl rdx, 32
        or rax, rdx
        mov rcx, 0x100000003
        CHECK_EQ rax, rcx, "FIXED_CTR_CTRL reads back 1_00000003H (Adaptive_Record of FIXED_CTR0)"
        mov ecx, 0x3F1                  ; PEBS_ENABLE: PMC4, FIXED_CTR0 (32)
        mov eax, 1 << 4
        mov edx, 1
        wrmsr
        rdtsc
        mov [tsc_before], eax
        mov [tsc_before + 4], edx
        WRMSR64 MSR_DEBUGCTL, DBG_LBR | (1 << 12)    ; LBR, FREEZE_PERFMON_ON_PMI
        mov rbx, 0xB0B0B0B00000B0B0
        mov rbp, 0xBBBBBBBB0000BBBB
        mov rsi, 0x5151515100005151
        mov rdi, 0xD1D1D1D10000D1D1
        mov r8, 0x8000000000000008
        mov r9, 0x9000000000000009
        mov r10, 0xA00000000000000A
        mov r11, 0xB00000000000000B
        mov r12, 0xC00000000000000C
        mov r13, 0xD00000000000000D
        mov r14, 0xE00000000000000E
        mov r15, 0xF00000000000000F
        mov [rsp_before], rsp
        mov rax, ALIAS(w)
        mov rdx, RT_ALIAS
        add rax, rdx                    ; rax = A(w)
        sti
cw:     call rax                        ; runs w at the alias
        cli
        WRMSR64 MSR_DEBUGCTL, 0
        rdtsc
        mov [tsc_after], eax
        mov [tsc_after + 4], edx
        WRMSR64 0x38F, 0
        WRMSR64 0x3F1, 0
        call dump
        call checks
        mov ecx, 0x390                  ; unfreeze (CTR_FRZ) for whoever runs next
        xor eax, eax
        mov edx, 1 << (59 - 32)
        wrmsr
        ret

; Runs at its alias address.
w:
jb0:    jmp lb0
lb0:
jb1:    jmp lb1
lb1:
jb2:    jmp lb2
lb2:    pushfq
        pop qword [flags_at]
        mov ecx, 0x38F
        mov eax, 1 << 4
        mov edx, 1
en:     wrmsr                           ; GLOBAL_CTRL: PMC4, FIXED_CTR0; counted: PMC4 wraps
i1:     mov rax, 0xA1A1A1A1A1A1A1A1
i2:     lea r8, [r8 + 1]
i3:     not r15
i4:     jmp t4
        ud2
t4:     mov eax, 5
        ret

checks:
        mov rax, [ds_area + 0x28]
        sub rax, pebs_buffer
        CHECK_EQ rax, 2 * REC, "PEBS index = base + 420H (two 210H records)"
        CHECK_EQ qword [pmi_count], 1, "one PMI: the index reached the threshold with record 2"
        LOAD_A rax, t4
        CHECK_EQ qword [pmi_rip], rax, "PMI frame RIP = A(t4) (after record 2's instruction i4)"
        mov rax, (1 << 62) | (1 << 59)
        CHECK_EQ qword [pmi_status], rax, "PMI: GLOBAL_STATUS = OvfBuffer (62) | CTR_FRZ (59)"

        ; ---- record 1 (PMC4 at i1)
        mov rsi, pebs_buffer
        ; basic group (00H-1FH)
        mov rax, (REC << 48) | DATA_CFG
        CHECK_EQ qword [rsi + 0x00], rax, "record 1: [47:0] format = 0300000EH, [63:48] size = 210H"
        LOAD_A rax, i1
        CHECK_EQ qword [rsi + 0x08], rax, "record 1: eventing IP = A(i1)"
        CHECK_EQ qword [rsi + 0x10], 1 << 4, "record 1: applicable counters = PMC4"
        mov rax, [rsi + 0x18]
        cmp rax, [tsc_before]
        CHECK_CC ae, "record 1: TSC >= the RDTSC before counting"
        mov rax, [tsc_after]
        cmp rax, [rsi + 0x18]
        CHECK_CC ae, "record 1: TSC <= the RDTSC after the run"
        ; GPR group (20H-AFH): no memory info group before it
        mov rax, [flags_at]
        CHECK_EQ qword [rsi + GPR + 0x00], rax, "record 1: GPRs: RFLAGS at 20H as saved at A(lb2)"
        LOAD_A rax, i2
        CHECK_EQ qword [rsi + GPR + 0x08], rax, "record 1: GPRs: RIP at 28H = A(i2) (after the event i1)"
        mov rax, 0xA1A1A1A1A1A1A1A1
        CHECK_EQ qword [rsi + GPR + 0x10], rax, "record 1: GPRs: RAX at 30H = A1A1A1A1_A1A1A1A1H (after i1)"
        CHECK_EQ qword [rsi + GPR + 0x18], 0x38F, "record 1: GPRs: RCX at 38H = 38FH"
        CHECK_EQ qword [rsi + GPR + 0x20], 1, "record 1: GPRs: RDX at 40H = 1"
        mov rax, 0xB0B0B0B00000B0B0
        CHECK_EQ qword [rsi + GPR + 0x28], rax, "record 1: GPRs: RBX at 48H"
        mov rax, [rsp_before]
        sub rax, 8
        CHECK_EQ qword [rsi + GPR + 0x30], rax, "record 1: GPRs: RSP at 50H = RSP before the call - 8"
        mov rax, 0xBBBBBBBB0000BBBB
        CHECK_EQ qword [rsi + GPR + 0x38], rax, "record 1: GPRs: RBP at 58H"
        mov rax, 0x5151515100005151
        CHECK_EQ qword [rsi + GPR + 0x40], rax, "record 1: GPRs: RSI at 60H"
        mov rax, 0xD1D1D1D10000D1D1
        CHECK_EQ qword [rsi + GPR + 0x48], rax, "record 1: GPRs: RDI at 68H"
        mov rax, 0x8000000000000008
        CHECK_EQ qword [rsi + GPR + 0x50], rax, "record 1: GPRs: R8 at 70H"
        mov rax, 0x9000000000000009
        CHECK_EQ qword [rsi + GPR + 0x58], rax, "record 1: GPRs: R9 at 78H"
        mov rax, 0xA00000000000000A
        CHECK_EQ qword [rsi + GPR + 0x60], rax, "record 1: GPRs: R10 at 80H"
        mov rax, 0xB00000000000000B
        CHECK_EQ qword [rsi + GPR + 0x68], rax, "record 1: GPRs: R11 at 88H"
        mov rax, 0xC00000000000000C
        CHECK_EQ qword [rsi + GPR + 0x70], rax, "record 1: GPRs: R12 at 90H"
        mov rax, 0xD00000000000000D
        CHECK_EQ qword [rsi + GPR + 0x78], rax, "record 1: GPRs: R13 at 98H"
        mov rax, 0xE00000000000000E
        CHECK_EQ qword [rsi + GPR + 0x80], rax, "record 1: GPRs: R14 at A0H"
        mov rax, 0xF00000000000000F
        CHECK_EQ qword [rsi + GPR + 0x88], rax, "record 1: GPRs: R15 at A8H"
        ; XMM group (B0H-1AFH): XMMi at B0H + 10H * i
        mov rdi, xmm_pat
        call cmp_xmm_group
        REPORT "record 1: XMM0-XMM15 at B0H-1AFH = xmm_pat (byte j of XMMi = 16*i + j)"
        mov rax, 0x8786858483828180
        CHECK_EQ qword [rsi + XMM + 0x80], rax, "record 1: XMM8 [63:0] at 130H"
        mov rax, 0x8F8E8D8C8B8A8988
        CHECK_EQ qword [rsi + XMM + 0x88], rax, "record 1: XMM8 [127:64] at 138H"
        mov rax, 0x9796959493929190
        CHECK_EQ qword [rsi + XMM + 0x90], rax, "record 1: XMM9 [63:0] at 140H"
        mov rax, 0xA7A6A5A4A3A2A1A0
        CHECK_EQ qword [rsi + XMM + 0xA0], rax, "record 1: XMM10 [63:0] at 150H"
        mov rax, 0xB7B6B5B4B3B2B1B0
        CHECK_EQ qword [rsi + XMM + 0xB0], rax, "record 1: XMM11 [63:0] at 160H"
        mov rax, 0xC7C6C5C4C3C2C1C0
        CHECK_EQ qword [rsi + XMM + 0xC0], rax, "record 1: XMM12 [63:0] at 170H"
        mov rax, 0xD7D6D5D4D3D2D1D0
        CHECK_EQ qword [rsi + XMM + 0xD0], rax, "record 1: XMM13 [63:0] at 180H"
        mov rax, 0xE7E6E5E4E3E2E1E0
        CHECK_EQ qword [rsi + XMM + 0xE0], rax, "record 1: XMM14 [63:0] at 190H"
        mov rax, 0xF7F6F5F4F3F2F1F0
        CHECK_EQ qword [rsi + XMM + 0xF0], rax, "record 1: XMM15 [63:0] at 1A0H"
        mov rax, 0xFFFEFDFCFBFAF9F8
        CHECK_EQ qword [rsi + XMM + 0xF8], rax, "record 1: XMM15 [127:64] at 1A8H"
        ; LBR group (1B0H-20FH): entry j = FROM, TO, INFO of the j-th most recent branch
        LOAD_A rax, jb2
        CHECK_EQ qword [rsi + LBR + 0x00], rax, "record 1: LBR entry 0 FROM = A(jb2)"
        LOAD_A rax, lb2
        CHECK_EQ qword [rsi + LBR + 0x08], rax, "record 1: LBR entry 0 TO = A(lb2)"
        CHECK_EQ qword [rsi + LBR + 0x10], 0, "record 1: LBR entry 0 INFO = 0"
        LOAD_A rax, jb1
        CHECK_EQ qword [rsi + LBR + 0x18], rax, "record 1: LBR entry 1 FROM = A(jb1)"
        LOAD_A rax, lb1
        CHECK_EQ qword [rsi + LBR + 0x20], rax, "record 1: LBR entry 1 TO = A(lb1)"
        LOAD_A rax, jb0
        CHECK_EQ qword [rsi + LBR + 0x30], rax, "record 1: LBR entry 2 FROM = A(jb0)"
        LOAD_A rax, lb0
        CHECK_EQ qword [rsi + LBR + 0x38], rax, "record 1: LBR entry 2 TO = A(lb0)"
        CHECK_EQ qword [rsi + LBR + 0x48], cw, "record 1: LBR entry 3 FROM = cw (the call in main)"
        LOAD_A rax, w
        CHECK_EQ qword [rsi + LBR + 0x50], rax, "record 1: LBR entry 3 TO = A(w)"
        CHECK_EQ qword [rsi + LBR + 0x58], 0, "record 1: LBR entry 3 INFO = 0"

        ; ---- record 2 (FIXED_CTR0 at i4)
        add rsi, REC
        mov rax, (REC << 48) | DATA_CFG
        CHECK_EQ qword [rsi + 0x00], rax, "record 2: format 0300000EH (FIXED_CTR0's Adaptive_Record), size 210H"
        LOAD_A rax, i4
        CHECK_EQ qword [rsi + 0x08], rax, "record 2: eventing IP = A(i4)"
        mov rax, 1 << 32
        CHECK_EQ qword [rsi + 0x10], rax, "record 2: applicable counters = FIXED_CTR0 (bit 32)"
        mov rax, [rsi + 0x18]
        cmp rax, [rsi - REC + 0x18]
        CHECK_CC ae, "record 2: TSC >= record 1's TSC"
        mov rax, [tsc_after]
        cmp rax, [rsi + 0x18]
        CHECK_CC ae, "record 2: TSC <= the RDTSC after the run"
        mov rax, [flags_at]
        CHECK_EQ qword [rsi + GPR + 0x00], rax, "record 2: GPRs: RFLAGS unchanged (lea, not, jmp)"
        LOAD_A rax, t4
        CHECK_EQ qword [rsi + GPR + 0x08], rax, "record 2: GPRs: RIP = A(t4) (the target of the event i4)"
        mov rax, 0xA1A1A1A1A1A1A1A1
        CHECK_EQ qword [rsi + GPR + 0x10], rax, "record 2: GPRs: RAX = A1A1A1A1_A1A1A1A1H"
        mov rax, 0x8000000000000009
        CHECK_EQ qword [rsi + GPR + 0x50], rax, "record 2: GPRs: R8 = 80000000_00000009H (after i2)"
        mov rax, 0x9000000000000009
        CHECK_EQ qword [rsi + GPR + 0x58], rax, "record 2: GPRs: R9 as set"
        mov rax, 0x0FFFFFFFFFFFFFF0
        CHECK_EQ qword [rsi + GPR + 0x88], rax, "record 2: GPRs: R15 = 0FFFFFFF_FFFFFFF0H (after i3)"
        mov rdi, xmm_pat
        call cmp_xmm_group
        REPORT "record 2: XMM0-XMM15 = xmm_pat"
        LOAD_A rax, i4
        CHECK_EQ qword [rsi + LBR + 0x00], rax, "record 2: LBR entry 0 FROM = A(i4) (the eventing branch)"
        LOAD_A rax, t4
        CHECK_EQ qword [rsi + LBR + 0x08], rax, "record 2: LBR entry 0 TO = A(t4)"
        LOAD_A rax, jb2
        CHECK_EQ qword [rsi + LBR + 0x18], rax, "record 2: LBR entry 1 FROM = A(jb2)"
        LOAD_A rax, lb1
        CHECK_EQ qword [rsi + LBR + 0x38], rax, "record 2: LBR entry 2 TO = A(lb1)"
        LOAD_A rax, jb0
        CHECK_EQ qword [rsi + LBR + 0x48], rax, "record 2: LBR entry 3 FROM = A(jb0)"
        LOAD_A rax, lb0
        CHECK_EQ qword [rsi + LBR + 0x50], rax, "record 2: LBR entry 3 TO = A(lb0)"
        add rsi, REC
        CHECK_EQ qword [rsi + 0x00], 0, "nothing after record 2"

        ; ---- counters (frozen by the PMI)
        mov ecx, 0xC5
        rdmsr
        shl rdx, 32
        or rax, rdx
        mov rcx, PMC4_RESET + 3
        CHECK_EQ rax, rcx, "PMC4 = 2^48 - FDH (reloaded by record 1, then i2-i4; frozen by the PMI)"
        mov ecx, 0x309
        rdmsr
        shl rdx, 32
        or rax, rdx
        CHECK_EQ rax, FIX0_RESET, "FIXED_CTR0 = 100H (reloaded by record 2; frozen)"
        ret

; rsi = record, rdi = expected XMM group: ZF=1 when its 100H bytes equal. Keeps RSI.
cmp_xmm_group:
        push rsi
        push rcx
        add rsi, XMM
        mov ecx, 0x100 / 8
        cld
        repe cmpsq
        pop rcx
        pop rsi
        ret

dump:
        PRINT "PEBS: index="
        mov rax, [ds_area + 0x28]
        PRINT_HEX64
        NEWLINE
        mov rsi, pebs_buffer
.r:
        cmp rsi, [ds_area + 0x28]
        jae .done
        PRINT "  format/size="
        mov rax, [rsi + 0x00]
        PRINT_HEX64
        PRINT " ip="
        mov rax, [rsi + 0x08]
        PRINT_HEX64
        PRINT " rip="
        mov rax, [rsi + GPR + 0x08]
        PRINT_HEX64
        NEWLINE
        add rsi, REC
        jmp .r
.done:
        ret

; rbx = frame
pmi_handler:
        inc qword [pmi_count]
        mov rax, [rbx + F64_RIP]
        mov [pmi_rip], rax
        mov ecx, 0x38E
        rdmsr
        shl rdx, 32
        or rax, rdx
        mov [pmi_status], rax
        mov ecx, 0x390                  ; clear OvfBuffer only: CTR_FRZ keeps the counters frozen
        xor eax, eax
        mov edx, 1 << (62 - 32)
        wrmsr
        mov edi, LVT_PERFMON
        and dword [rdi], ~(1 << 16)
        APIC_EOI
        ret

section .data
align 16
xmm_pat:
%assign i 0
%rep 256
        db i
%assign i i + 1
%endrep
align 8
tsc_before:     dq 0
tsc_after:      dq 0
pmi_rip:        dq 0
pmi_status:     dq 0
rsp_before:     dq 0
flags_at:       dq 0
pmi_count:      dq 0
align 64
ds_area:        times 0xA0 db 0
align 64
pebs_buffer:    times 3 * REC db 0

%include "end.inc"
