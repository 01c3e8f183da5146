; pebs_lm64: PEBS in IA-32e mode (SDM vol. 3B 18.6.1.1, table 18-23: in IA-32e mode every field
; holds the full 64-bit register, R8-R15 included), with the sampled code running at the high
; canonical alias RT_ALIAS (0xFFFFFFF8_10000000 + offset from 1 MiB), 64-bit ring 0.
; Setup: DS save area (64-bit format) with a 4-record PEBS buffer and the threshold one record
; beyond the maximum (no PMI), PEBS counter 0 reset 2^48 - 3; PMC0 counts INST_RETIRED.ALL
; (C0H/01H, USR|OS|EN) from 2^48 - 2, PEBS_ENABLE bit 0. A WRMSR retires under the configuration
; it leaves (docs/pmu-model.md): the one that sets GLOBAL_CTRL is counted, the one that clears it
; is not.
;  - the enabling WRMSR (it leaves RCX = 0x38F, RDX = 0) counts to 2^48 - 1;
;  - `call rsi` (to A(fn)) wraps PMC0: PEBS armed;
;  - f1 `mov r9, 0x99` is the next event: record 1 = the state after it: RIP = A(f2), R9 = 0x99,
;    R8/R15/RBX as set before, RSP = the RSP before the call - 8; PMC0 = 2^48 - 3;
;  - f2, f3 count to 2^48 - 1, f4 wraps (armed), f5 `mov r10, 0xAA` writes record 2: RIP =
;    A(f6), R10 = 0xAA; PMC0 = 2^48 - 3;
;  - back in main, f6 (RET) counts to 2^48 - 2, `mov ecx, 0x38F` to 2^48 - 1, `mov eax, 0`
;    wraps (armed), `xor edx, edx` writes record 3 with RIP = stop (the WRMSR that clears
;    GLOBAL_CTRL), PMC0 = 2^48 - 3; that WRMSR retires with PMC0 disabled (not counted): PMC0
;    ends at 2^48 - 3. Three records.
; Expected: status 1 under vbts (westmere, skylake); QEMU TCG: SKIP (155).
%define RT_LONG_MODE 1
%include "rt.inc"
%include "debug64.inc"

%define ALIAS(x) ((x) - RT_LOAD_ADDR)   ; offset; the code adds RT_ALIAS at run time

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
        test eax, 1 << 12
        jnz .skip
        mov eax, 0xA
        call pcpuid
        cmp al, 2
        jb .skip
        mov ecx, 0x345
        rdmsr
        shr eax, 8
        and eax, 0xF
        jz .skip
        mov qword [rec], 0xB0
        cmp eax, 3
        jb setup
        mov qword [rec], 0xC0
        jmp setup
.skip:
        SKIP "PEBS: needs DS, DTES64, PDCM, a PEBS record format and arch perfmon v2"
        ret

pcpuid:                                 ; the image's one CPUID site
        push rbx
        cpuid
        pop rbx
        ret

setup:
        mov rax, pebs_buffer
        mov [ds_area + 0x20], rax
        mov [ds_area + 0x28], rax
        mov rcx, [rec]
        lea rdx, [rax + rcx * 4]
        mov [ds_area + 0x30], rdx       ; maximum: 4 records
        add rdx, rcx
        mov [ds_area + 0x38], rdx       ; threshold: beyond the maximum, no PMI
        mov rax, 0x0000FFFFFFFFFFFD
        mov [ds_area + 0x40], rax       ; reset 2^48 - 3
        mov ecx, MSR_DS_AREA
        mov rax, ds_area
        mov rdx, rax
        shr rdx, 32
        wrmsr
        WRMSR64 0x38F, 0
        WRMSR64 0xC1, 0xFFFFFFFE        ; 2^48 - 2
        WRMSR64 0x186, 0xC0 | (1 << 8) | (1 << 16) | (1 << 17) | (1 << 22)
        WRMSR64 0x3F1, 1
        mov rbx, RT_ALIAS
        mov rsi, ALIAS(fn)
        add rsi, rbx                    ; rsi = A(fn)
        mov r8, 0x8888000000000008
        mov r15, 0xF15F15F15F15F15F
        mov rbx, 0xB0B0B0B0B0B0B0B0
        mov [rsp_before], rsp
        WRMSR64 0x38F, 1                ; counted first: 2^48 - 1
        call rsi                        ; counted second: PMC0 wraps
        mov ecx, 0x38F
        mov eax, 0
        xor edx, edx
stop:   wrmsr                           ; GLOBAL_CTRL = 0
        WRMSR64 0x3F1, 0
        WRMSR64 0x186, 0
        call dump
        mov rax, [ds_area + 0x28]
        sub rax, pebs_buffer
        mov rcx, [rec]
        imul rcx, rcx, 3
        CHECK_EQ rax, rcx, "PEBS index = base + 3 records"
        mov rsi, pebs_buffer
        mov rax, ALIAS(f2)
        mov rdx, RT_ALIAS
        add rax, rdx
        CHECK_EQ qword [rsi + 0x08], rax, "record 1: RIP = A(f2), the 64-bit alias after the event f1"
        mov rax, 0xB0B0B0B0B0B0B0B0
        CHECK_EQ qword [rsi + 0x18], rax, "record 1: RBX (64 bits) at 18H"
        CHECK_EQ qword [rsi + 0x20], 0x38F, "record 1: RCX at 20H"
        mov rax, [rsp_before]
        sub rax, 8
        CHECK_EQ qword [rsi + 0x48], rax, "record 1: RSP at 48H = RSP before the call - 8"
        mov rax, 0x8888000000000008
        CHECK_EQ qword [rsi + 0x50], rax, "record 1: R8 at 50H"
        CHECK_EQ qword [rsi + 0x58], 0x99, "record 1: R9 at 58H = 0x99 (the state after f1)"
        mov rax, 0xF15F15F15F15F15F
        CHECK_EQ qword [rsi + 0x88], rax, "record 1: R15 at 88H"
        CHECK_EQ qword [rsi + 0x90], 1, "record 1: 90H = PMC0"
        add rsi, [rec]
        mov rax, ALIAS(f6)
        mov rdx, RT_ALIAS
        add rax, rdx
        CHECK_EQ qword [rsi + 0x08], rax, "record 2: RIP = A(f6)"
        CHECK_EQ qword [rsi + 0x60], 0xAA, "record 2: R10 at 60H = 0xAA"
        add rsi, [rec]
        CHECK_EQ qword [rsi + 0x08], stop, "record 3: RIP = stop (the disabling WRMSR)"
        CHECK_EQ qword [rsi + 0x10], 0, "record 3: RAX = 0 (after mov eax, 0)"
        CHECK_EQ qword [rsi + 0x20], 0x38F, "record 3: RCX = 0x38F"
        mov ecx, 0xC1
        rdmsr
        shl rdx, 32
        or rax, rdx
        mov rcx, 0x0000FFFFFFFFFFFD
        CHECK_EQ rax, rcx, "PMC0 = 2^48 - 3 (reset after record 3; the disabling WRMSR not counted)"
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
        PRINT "  rip="
        mov rax, [rsi + 0x08]
        PRINT_HEX64
        PRINT " r9="
        mov rax, [rsi + 0x58]
        PRINT_HEX64
        PRINT " r10="
        mov rax, [rsi + 0x60]
        PRINT_HEX64
        NEWLINE
        add rsi, [rec]
        jmp .r
.done:
        ret

; Runs at its alias address.
fn:
f1:     mov r9, 0x99
f2:     nop
f3:     nop
f4:     nop
f5:     mov r10, 0xAA
f6:     ret

section .data
align 8
rec:            dq 0xB0
rsp_before:     dq 0
align 64
ds_area:        times 0x60 db 0
align 64
pebs_buffer:    times 4 * 0xC0 db 0

%include "end.inc"
