; mem_events: the model-specific events that count retired instructions which load and which
; store (docs/pmu-model.md, "Retired loads and stores"): MEM_INST_RETIRED.LOADS/STORES (0BH,
; umask 01H/02H) on Westmere (CPUID family 6, models 25H/2CH/2FH), MEM_INST_RETIRED.ALL_LOADS/
; ALL_STORES (D0H, umask 81H/82H) on Skylake (4EH/5EH) and Ice Lake (6AH/6CH/7DH/7EH); other
; models SKIP, as does a CPU without arch perfmon v2 (QEMU TCG). An instruction counts once for
; each kind of access among its memory operands, explicit or implicit (stack slots, string
; operands); LEA and a WRMSR do not access memory.
; PMC0 counts loads, PMC1 stores (OS, EN); GLOBAL_CTRL = 3 enables both around each window:
;   w1: mov eax,[x] (L); mov [y],eax (S); add [x],eax (L+S); push eax (S); pop eax (L);
;       call sub1 (S) / ret (L); movsd (L+S); lea eax,[x]; nop -> loads 5, stores 5
;   w2: 100 iterations of mov eax,[esi] (L); mov [edi],eax (S); dec ecx; jnz -> loads 100,
;       stores 100 (the counters go on from w1: 105 and 105)
;   w3: PMC1 = 2^48 - 1 (a 32-bit WRMSR of 0xFFFFFFFF, sign-extended) with INT, LVT perfmon
;       vector 0x50: mov eax,[x] (L) does not count there; mov [y],eax (S) wraps PMC1: the PMI
;       comes before the next instruction (frame EIP = w3_next), GLOBAL_STATUS = 2;
;       FREEZE_PERFMON_ON_PMI clears GLOBAL_CTRL at the PMI, so the handler's accesses are not
;       counted: PMC0 = 106, PMC1 = 0.
;   w4: PMC1 = 2^48 - 1 again, INT, no freeze (on perfmon v4 the guest first clears w3's
;       GLOBAL_STATUS.CTR_FRZ), IF = 0: mov [y],eax (S) wraps it and the PMI waits; rep movsd
;       (ECX = 2: two iterations) retires as one instruction that loads and stores; counting
;       off, then PMC0 = 107, PMC1 = 1 (the REP MOVSD); sti, then nop in its shadow: the PMI
;       comes before the instruction after that nop (frame EIP = w4_pmi). (An instruction with
;       a REP prefix counts once, as INST_RETIRED counts it; the SDM does not say how
;       MEM_INST_RETIRED counts string iterations.)
;   w5: L1D.REPLACEMENT (51H/01H, lines brought into the L1D; the model's L1D has no prefetcher
;       and sees only the accesses made while the event counts, so `l1buf` is cold): 64 loads 64
;       bytes apart over its 4 KB -> 64; the same loads again hit (64 lines fit in the 32 KB
;       8-way / 48 KB 12-way L1D) -> still 64.
; Expected: status 1 under vbts (westmere, skylake, icelake-server); QEMU TCG: SKIP (155).
%include "rt.inc"
%include "debug32.inc"

%define EN_OS           ((1 << 17) | (1 << 22))

%macro ENABLE 0
        mov ecx, 0x38F
        mov eax, 3
        xor edx, edx
        wrmsr
%endmacro
%macro DISABLE 0
        mov ecx, 0x38F
        xor eax, eax
        xor edx, edx
        wrmsr
%endmacro

main:
        PERFMON_REQUIRE 2, 2, .skip
        call dbg_core_gen32
        mov dword [ev_load], 0x010B
        mov dword [ev_store], 0x020B
        cmp eax, 1
        je .go
        mov dword [ev_load], 0x81D0
        mov dword [ev_store], 0x82D0
        test eax, eax
        jnz .go
.skip:
        SKIP "retired load/store events: arch perfmon v2 on a Westmere, Skylake or Ice Lake model"
        ret
.go:
        SET_HANDLER PMI_VEC, pmi_handler
        APIC_ENABLE
        mov dword [LVT_PERFMON], PMI_VEC
        WRMSR32 0x38F, 0
        WRMSR32 0xC1, 0
        WRMSR32 0xC2, 0
        mov eax, [ev_load]
        or eax, EN_OS
        mov ecx, 0x186
        xor edx, edx
        wrmsr
        mov eax, [ev_store]
        or eax, EN_OS
        mov ecx, 0x187
        wrmsr
        ; w1
        mov esi, src
        mov edi, dst
        ENABLE
        mov eax, [x]
        mov [y], eax
        add [x], eax
        push eax
        pop eax
        call sub1
        movsd
        lea eax, [x]
        nop
        DISABLE
        call read_counters
        CHECK_EQ dword [loads], 5, "w1: 5 instructions that load"
        CHECK_EQ dword [stores], 5, "w1: 5 instructions that store"
        ; w2
        mov esi, src
        mov edi, dst
        mov ebx, 100
        ENABLE
.w2:    mov eax, [esi]
        mov [edi], eax
        dec ebx
        jnz .w2
        DISABLE
        call read_counters
        CHECK_EQ dword [loads], 105, "w2: 100 more loads"
        CHECK_EQ dword [stores], 105, "w2: 100 more stores"
        ; w3: the overflow PMI on the store counter.
        WRMSR32 0xC2, 0xFFFFFFFF
        mov eax, [ev_store]
        or eax, EN_OS | (1 << 20)       ; INT
        mov ecx, 0x187
        xor edx, edx
        wrmsr
        WRMSR32 MSR_DEBUGCTL, 1 << 12   ; FREEZE_PERFMON_ON_PMI
        sti
        ENABLE
        mov eax, [x]
        mov [y], eax
w3_next:
        nop
        DISABLE
        cli
        WRMSR32 MSR_DEBUGCTL, 0
        CHECK_EQ dword [pmi_count], 1, "w3: one PMI"
        CHECK_EQ dword [pmi_eip], w3_next, "w3: PMI after the store that wrapped PMC1 (frame EIP = w3_next)"
        CHECK_EQ dword [pmi_status], 2, "w3: GLOBAL_STATUS = PMC1 overflow (bit 1)"
        call read_counters
        CHECK_EQ dword [loads], 106, "w3: PMC0 = 106"
        CHECK_EQ dword [stores], 0, "w3: PMC1 wrapped to 0"
        ; w4: a PMI that waits (IF=0) while a REP string instruction runs its iterations.
        ; Perfmon v4 (Skylake on) keeps the freeze in GLOBAL_STATUS.CTR_FRZ (bit 59) until
        ; the guest clears it; v3 has no such bit (it cleared GLOBAL_CTRL instead).
        mov ecx, 0x38E
        rdmsr
        test edx, 1 << 27
        jz .w4
        mov ecx, 0x390
        xor eax, eax
        mov edx, 1 << 27
        wrmsr
.w4:    WRMSR32 0xC2, 0xFFFFFFFF
        mov esi, src
        mov edi, dst
        cli
        ENABLE
        mov [y], eax                    ; S: PMC1 wraps, the PMI waits for IF
        mov ecx, 2
        rep movsd                       ; L+S, two iterations, one instruction
        DISABLE
        call read_counters
        CHECK_EQ dword [loads], 107, "w4: REP MOVSD is one instruction that loads: PMC0 = 107"
        CHECK_EQ dword [stores], 1, "w4: and one that stores: PMC1 = 1"
        sti
        nop                             ; the STI's shadow
w4_pmi:
        nop
        cli
        CHECK_EQ dword [pmi_count], 2, "w4: one more PMI"
        CHECK_EQ dword [pmi_eip], w4_pmi, "w4: taken after STI and its shadow (frame EIP = w4_pmi)"
        ; w5: L1D.REPLACEMENT (51H/01H) on PMC2, alone (GLOBAL_CTRL = 4).
        WRMSR32 0xC3, 0
        WRMSR32 0x188, 0x0151 | EN_OS
        mov esi, l1buf
        call w5_window
        CHECK_EQ dword [repl], 64, "w5: 64 loads 64 bytes apart over a cold 4 KB: 64 lines replaced"
        mov esi, l1buf
        call w5_window
        CHECK_EQ dword [repl], 64, "w5: the same lines again stay in the 32/48 KB L1D: still 64"
        ret

sub1:
        ret

; 64 loads from ESI at a 64-byte stride with PMC2 counting; PMC2 into [repl].
w5_window:
        mov ebx, 64
        mov ecx, 0x38F
        mov eax, 4
        xor edx, edx
        wrmsr
.l:     mov eax, [esi]
        add esi, 64
        dec ebx
        jnz .l
        xor eax, eax
        wrmsr
        mov ecx, 0xC3
        rdmsr
        mov [repl], eax
        ret

read_counters:
        mov ecx, 0xC1
        rdmsr
        mov [loads], eax
        mov ecx, 0xC2
        rdmsr
        mov [stores], eax
        ret

        PMI_RECORD_HANDLER 2

section .data
align 4
ev_load:        dd 0
ev_store:       dd 0
loads:          dd 0
stores:         dd 0
repl:           dd 0
x:              dd 1
y:              dd 0
src:            dd 7, 8
dst:            dd 0, 0

section .bss
alignb 4096
l1buf:          resb 4096

%include "end.inc"
