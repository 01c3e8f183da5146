; tsc_deadline_pm32: the LAPIC timer's TSC-deadline mode (SDM vol. 3A 10.5.4.1) on a CPU model
; that has it (CPUID.1:ECX.TSC_Deadline[24]: skylake, icelake-server; westmere has not: SKIP).
;   1. LVT timer mode 10b reads back; a deadline already passed (the TSC just read) fires at once:
;      the handler has run once by the instruction after a serializing CPUID that follows the
;      WRMSR (kvm-unit-tests apic.c, "tsc deadline timer"), and IA32_TSC_DEADLINE reads 0 again.
;   2. A deadline 10^8 TSC ticks ahead reads back while armed (that far, so that the host
;      descheduling vbts between the WRMSR and the RDMSR cannot let the guest's TSC, which runs
;      on host time here, pass it first: 200 000 ticks, ~77 us, did under a loaded CI run);
;      HLT waits for it; the handler's RDTSC is at or past it; the MSR then reads 0.
;   3. A write of 0 disarms an armed deadline (10^8 ticks ahead): no interrupt 10 M ticks past
;      it, the MSR reads 0.
;   4. In the mode, the initial count ignores writes (reads 0) and the current count reads 0.
;   5. Leaving the mode (to one-shot) disarms an armed deadline; outside it the MSR reads 0 and
;      ignores writes; back in the mode it is still disarmed.
;   6. A PMI between arming a deadline and reaching it leaves it armed: PMC0 counts
;      INST_RETIRED from -4 with INT set and overflows within the next instructions (PMI vector
;      0x41, fixed delivery; GLOBAL_CTRL bit 0 set); the deadline, 10^8 ticks ahead, then fires while the guest spins
;      on RDTSC (until 2026-11-26 vbts's PMI delivery, which sets the LVT mask bit by rewriting
;      the LAPIC page, disarmed it in the TCG engine, and Linux's timer stopped for good).
; 13 checks. Expected: status 1 with --cpu=skylake; QEMU TCG's default CPU has no TSC-deadline
; timer: SKIP (155).
%include "rt.inc"
%include "debug32.inc"

%define VEC                 0x40
%define PMI_VEC             0x41
%define EVT_INSN            (0xC0 | (1 << 16) | (1 << 17) | (1 << 20) | (1 << 22))  ; USR OS INT EN
%define MSR_TSC_DEADLINE    0x6E0
%define LVT_DEADLINE        (2 << 17)

main:
        mov eax, 1
        xor ecx, ecx
        call dbg_cpuid32
        bt ecx, 24
        jc .has
        SKIP "TSC-deadline timer: CPUID.1:ECX[24] is clear on this CPU"
        ret
.has:
        SET_HANDLER VEC, timer_handler
        SET_HANDLER LAPIC_SPURIOUS_VEC, spurious_handler
        APIC_ENABLE
        mov dword [LAPIC_BASE + LAPIC_LVT_TIMER], LVT_DEADLINE | VEC
        CHECK_EQ dword [LAPIC_BASE + LAPIC_LVT_TIMER], LVT_DEADLINE | VEC, "LVT timer reads back mode 10b (TSC deadline)"

        ; 1. A deadline in the past.
        sti
        rdtsc
        mov ecx, MSR_TSC_DEADLINE
        wrmsr
        mov eax, 0
        xor ecx, ecx
        call dbg_cpuid32                ; serializing, as kvm-unit-tests does
        mov esi, [timer_count]
        cli
        CHECK_EQ esi, 1, "a deadline already passed: the interrupt by the next instruction"
        call read_deadline
        CHECK_EQ eax, 0, "IA32_TSC_DEADLINE reads 0 once the timer fired"

        ; 2. A deadline ahead; HLT until it fires.
        rdtsc
        add eax, 100000000
        adc edx, 0
        mov [deadline], eax
        mov [deadline + 4], edx
        mov ecx, MSR_TSC_DEADLINE
        wrmsr
        mov ecx, MSR_TSC_DEADLINE
        rdmsr
        xor eax, [deadline]
        xor edx, [deadline + 4]
        or eax, edx
        CHECK_EQ eax, 0, "an armed deadline reads back"
        sti
        hlt                             ; the timer's IRET returns after the HLT
        cli
        CHECK_EQ dword [timer_count], 2, "HLT woke at the deadline: the handler ran once more"
        mov eax, [handler_tsc]
        mov edx, [handler_tsc + 4]
        sub eax, [deadline]
        sbb edx, [deadline + 4]         ; CF set iff the handler's TSC < the deadline
        setnc al
        movzx eax, al
        CHECK_EQ eax, 1, "the handler's TSC is at or past the deadline"
        call read_deadline
        CHECK_EQ eax, 0, "IA32_TSC_DEADLINE reads 0 after the wake-up"

        ; 3. Writing 0 disarms: no interrupt comes for the deadline written before it
        ; (10^8 ticks ahead, as in 2: the disarming WRMSR comes first even when the host
        ; deschedules vbts between the two).
        rdtsc
        add eax, 100000000
        adc edx, 0
        mov esi, eax
        mov ebx, edx
        mov ecx, MSR_TSC_DEADLINE
        wrmsr
        xor eax, eax
        xor edx, edx
        mov ecx, MSR_TSC_DEADLINE
        wrmsr
        sti
.spin:  rdtsc                           ; wait until the TSC is 10 M ticks past that deadline
        sub eax, esi                    ; (milliseconds: a host timer under KVM would have fired)
        sbb edx, ebx
        jc .spin
        cmp eax, 10000000
        jb .spin
        cli
        call read_deadline
        add eax, [timer_count]
        CHECK_EQ eax, 2, "a write of 0 disarmed it: no interrupt, the MSR reads 0"

        ; 4. The initial count in TSC-deadline mode.
        mov dword [LAPIC_BASE + LAPIC_LVT_TIMER], LVT_DEADLINE | VEC
        mov dword [LAPIC_BASE + LAPIC_TIMER_ICR], 1000
        mov eax, [LAPIC_BASE + LAPIC_TIMER_ICR]
        add eax, [LAPIC_BASE + LAPIC_TIMER_CCR]
        CHECK_EQ eax, 0, "the initial count ignores writes, the current count reads 0"

        ; 5. Leaving the mode disarms.
        rdtsc
        add edx, 0x100                  ; 2^40 ticks ahead: never reached here
        mov ecx, MSR_TSC_DEADLINE
        wrmsr
        mov dword [LAPIC_BASE + LAPIC_LVT_TIMER], VEC         ; one-shot, no initial count: no timer
        call read_deadline
        mov esi, eax
        rdtsc                           ; outside the mode a write is ignored
        mov ecx, MSR_TSC_DEADLINE
        wrmsr
        mov dword [LAPIC_BASE + LAPIC_LVT_TIMER], LVT_DEADLINE | VEC
        call read_deadline
        or eax, esi
        add eax, [timer_count]
        add eax, [spurious_count]
        CHECK_EQ eax, 2, "leaving the mode disarmed it; writes outside it are ignored; no spurious"

        ; 6. A PMI while a deadline is armed.
        SET_HANDLER PMI_VEC, pmi_handler
        mov dword [LVT_PERFMON], PMI_VEC
        rdtsc
        add eax, 100000000              ; tens of milliseconds: vbts's switch to counting
        adc edx, 0                      ; takes host time
        mov esi, eax
        mov ebx, edx
        mov ecx, MSR_TSC_DEADLINE
        wrmsr
        xor edx, edx
        mov eax, -4
        mov ecx, 0xC1                   ; PMC0
        wrmsr
        mov edx, 0xFFFF                 ; bits 47:32 of the 48-bit counter
        wrmsr
        xor edx, edx
        mov eax, 1
        mov ecx, 0x38F                  ; IA32_PERF_GLOBAL_CTRL: PMC0 (both models with
        wrmsr                           ; TSC-deadline mode have perfmon v4)
        mov eax, EVT_INSN
        mov ecx, 0x186                  ; PERFEVTSEL0: counting from here
        wrmsr
        sti
        nop
        nop
        nop
        nop
        nop
        nop
        cli
        xor eax, eax
        xor edx, edx
        mov ecx, 0x186
        wrmsr
        CHECK_EQ dword [pmi_count], 1, "the counter's PMI came while the deadline was armed"
        sti
.spin2: rdtsc                           ; until 10 M ticks past the deadline
        sub eax, esi
        sbb edx, ebx
        jc .spin2
        cmp eax, 10000000
        jb .spin2
        cli
        CHECK_EQ dword [timer_count], 3, "the deadline armed before the PMI fired after it"
        call read_deadline
        CHECK_EQ eax, 0, "IA32_TSC_DEADLINE reads 0 after it"
        ret

pmi_handler:
        inc dword [pmi_count]
        APIC_EOI
        ret

; EAX = 0 if IA32_TSC_DEADLINE is 0, else non-zero. Clobbers ECX, EDX.
read_deadline:
        mov ecx, MSR_TSC_DEADLINE
        rdmsr
        or eax, edx
        ret

timer_handler:                          ; EBX = frame
        rdtsc
        mov [handler_tsc], eax
        mov [handler_tsc + 4], edx
        inc dword [timer_count]
        APIC_EOI
        ret

spurious_handler:
        inc dword [spurious_count]
        ret

section .data
align 8
deadline:       dq 0
handler_tsc:    dq 0
timer_count:    dd 0
spurious_count: dd 0
pmi_count:      dd 0

%include "end.inc"
