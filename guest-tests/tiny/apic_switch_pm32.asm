; apic_switch_pm32: x2APIC mode, an armed TSC deadline and the TPR across the engine switches of
; `--engine=kvm-tcg` (docs/tcg-engine.md, "Switching engines"): the guest enables x2APIC and the
; TSC-deadline timer and arms a deadline while it runs untraced (on KVM), turns LBRs on (vbts
; moves it to the TCG engine) and waits for the deadline there; arms another, turns LBRs off
; (back to KVM) and waits again. On a CPU that has both features (skylake):
;   1. after LBR on: IA32_APIC_BASE still has EXTD, the x2APIC TPR MSR keeps 0x10, and the
;      deadline armed before fires once (HLT wakes; the handler's TSC is at or past it);
;   2. after LBR off: the same, with the deadline armed while traced;
;   3. no spurious interrupts.
; 8 checks. On one engine only (--engine=tcg) the same results. Expected: status 1 with
; --cpu=skylake; QEMU TCG's default CPU lacks x2APIC: SKIP.
%include "rt.inc"
%include "debug32.inc"

%define VEC                 0x40
%define MSR_APIC_BASE       0x1B
%define MSR_TSC_DEADLINE    0x6E0
%define X2(reg)             (0x800 + ((reg) >> 4))
%define AHEAD               20000000    ; TSC ticks (instructions while traced: HLT skips there)

main:
        mov eax, 1
        xor ecx, ecx
        call dbg_cpuid32
        and ecx, (1 << 21) | (1 << 24)
        cmp ecx, (1 << 21) | (1 << 24)
        je .has
        SKIP "x2APIC and TSC-deadline timer: CPUID.1:ECX[21] or [24] is clear on this CPU"
        ret
.has:
        SET_HANDLER VEC, timer_handler
        SET_HANDLER LAPIC_SPURIOUS_VEC, spurious_handler
        APIC_ENABLE
        WRMSR64 MSR_APIC_BASE, 0xFEE00000 | (1 << 11) | (1 << 10) | (1 << 8), 0
        WRMSR64 X2(0x320), (2 << 17) | VEC, 0   ; LVT timer: TSC-deadline mode
        WRMSR64 X2(0x80), 0x10, 0               ; TPR class 1: below the timer's class 4
        call arm

        ; 1. Into the TCG engine.
        WRMSR32 MSR_DEBUGCTL, DBG_LBR
        call check_apic_state
        CHECK_EQ eax, 0x10 | (1 << 10), "traced: x2APIC mode and TPR 0x10 kept"
        sti
        hlt
        cli
        CHECK_EQ dword [timer_count], 1, "traced: the deadline armed untraced fired once"
        call handler_past_deadline
        CHECK_EQ eax, 1, "traced: the handler's TSC is at or past that deadline"

        ; 2. Back to KVM.
        call arm
        WRMSR32 MSR_DEBUGCTL, 0
        call check_apic_state
        CHECK_EQ eax, 0x10 | (1 << 10), "untraced again: x2APIC mode and TPR 0x10 kept"
        sti
        hlt
        cli
        CHECK_EQ dword [timer_count], 2, "untraced again: the deadline armed while traced fired once"
        call handler_past_deadline
        CHECK_EQ eax, 1, "untraced again: the handler's TSC is at or past that deadline"
        mov ecx, MSR_TSC_DEADLINE
        rdmsr
        or eax, edx
        CHECK_EQ eax, 0, "IA32_TSC_DEADLINE reads 0 after it fired"
        CHECK_EQ dword [spurious_count], 0, "no spurious interrupts"
        ret

; Arms the deadline AHEAD ticks from now and keeps it in [deadline].
arm:
        rdtsc
        add eax, AHEAD
        adc edx, 0
        mov [deadline], eax
        mov [deadline + 4], edx
        mov ecx, MSR_TSC_DEADLINE
        wrmsr
        ret

; EAX = TPR | IA32_APIC_BASE.EXTD (bit 10).
check_apic_state:
        mov ecx, MSR_APIC_BASE
        rdmsr
        and eax, 1 << 10
        mov esi, eax
        mov ecx, X2(0x80)
        rdmsr
        or eax, esi
        ret

; EAX = 1 if the handler's TSC >= [deadline], else 0.
handler_past_deadline:
        mov eax, [handler_tsc]
        mov edx, [handler_tsc + 4]
        sub eax, [deadline]
        sbb edx, [deadline + 4]
        setnc al
        movzx eax, al
        ret

timer_handler:
        rdtsc
        mov [handler_tsc], eax
        mov [handler_tsc + 4], edx
        inc dword [timer_count]
        WRMSR64 X2(0xB0), 0, 0          ; EOI
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

%include "end.inc"
