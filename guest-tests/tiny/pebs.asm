; pebs: precise event-based sampling (SDM vol. 3B 18.4.4, 18.6.1.1 and table 18-23; 18.9.4 for
; the Skylake format), 32-bit ring 0. PEBS support: CPUID.1:EDX.DS, CPUID.1:ECX.DTES64 (the
; 64-bit DS save area, the only one PEBS uses here), CPUID.1:ECX.PDCM with a PEBS record format
; in IA32_PERF_CAPABILITIES[11:8] (1: 0xB0-byte records, Westmere; 3: 0xC8, Skylake, adding
; EventingIP at B0H, TX abort information at B8H and the TSC at C0H: SDM table 18-55, Linux's
; struct pebs_record_skl), IA32_MISC_ENABLE[12] (PEBS unavailable) clear, arch perfmon v2+.
; Otherwise SKIP.
; Setup: DS save area with BTS off; PEBS buffer of 4 records, interrupt threshold after 2
; records, PEBS counter 0 reset value 2^48 - 3. PMC0 counts INST_RETIRED.ALL (C0H, umask 01H,
; USR|OS|EN, no INT) from 2^48 - 1 (a 32-bit write of 0xFFFFFFFF, sign-extended); PEBS_ENABLE
; bit 0; DEBUGCTL.FREEZE_PERFMON_ON_PMI; LVT perfmon -> vector 0x50. The WRMSR of GLOBAL_CTRL
; enables counting and is counted itself (it retires under the configuration it leaves,
; docs/pmu-model.md); then i1..i8 (`mov eax, n`).
; Derivation (PEBS is trap-like: PERF_CAPABILITIES bit 6):
;  - the enabling WRMSR wraps PMC0 to 0: PEBS is armed (GLOBAL_STATUS bit 0 set).
;  - i1 is the next event: the assist writes record 1 with the state after i1 - EAX = 1, RIP =
;    i2 (the instruction after) - clears the overflow bit and reloads PMC0 = 2^48 - 3.
;  - i2, i3 count to 2^48 - 1, i4 wraps (armed), i5 writes record 2: EAX = 5, RIP = i6. The
;    index reaches the threshold (base + 2 records): PMI with GLOBAL_STATUS.OvfBuffer (bit 62),
;    delivered before i6 (frame EIP = i6); FREEZE_PERFMON_ON_PMI clears GLOBAL_CTRL, so nothing
;    after i5 is counted: PMC0 stays at the reset value 2^48 - 3.
;  - record 1's GLOBAL_STATUS field (format 1) holds bit 0, the overflow that armed it; format 3
;    has the applicable counters there (bit 0 too), EventingIP = i1 / i5 at B0H, 0 at B8H (no
;    TSX) and at C0H the TSC at the assist: record 2's is later than record 1's.
;  - the other registers of record 1 are what the code left: EBX/ESI/EDI/EBP set before, ECX =
;    0x38F and EDX = 0 from the GLOBAL_CTRL WRMSR, ESP unchanged, R8 0 (not IA-32e mode).
; Expected: status 1 under vbts (westmere, skylake); QEMU TCG: SKIP (155).
%include "rt.inc"
%include "debug32.inc"

%define NREC            4

main:
        mov eax, 1
        call dbg_cpuid32
        test edx, 1 << 21               ; DS
        jz .skip
        test ecx, 1 << 2                ; DTES64
        jz .skip
        test ecx, 1 << 15               ; PDCM
        jz .skip
        mov ecx, MSR_MISC_ENABLE
        rdmsr
        test eax, 1 << 12               ; PEBS unavailable
        jnz .skip
        mov eax, 0xA
        call dbg_cpuid32
        cmp al, 2
        jb .skip
        mov ecx, 0x345
        rdmsr
        shr eax, 8
        and eax, 0xF
        mov [fmt], eax
        jz .skip
        mov dword [rec], 0xB0
        cmp eax, 3
        jb .rec_ok
        mov dword [rec], 0xC8
.rec_ok:
        jmp setup
.skip:
        SKIP "PEBS: needs DS, DTES64, PDCM, a PEBS record format and arch perfmon v2"
        ret

setup:
        SET_HANDLER PMI_VEC, pmi_handler
        APIC_ENABLE
        mov dword [LVT_PERFMON], PMI_VEC
        ; DS save area (64-bit format): BTS fields 0; PEBS base/index/max/threshold; reset 0.
        mov eax, pebs_buffer
        mov [ds_area + 0x20], eax
        mov [ds_area + 0x28], eax
        mov ecx, [rec]
        lea edx, [eax + ecx * 2]
        mov [ds_area + 0x38], edx       ; threshold: after 2 records
        lea edx, [eax + ecx * 4]
        mov [ds_area + 0x30], edx       ; absolute maximum: 4 records
        mov dword [ds_area + 0x40], 0xFFFFFFFD
        mov dword [ds_area + 0x44], 0x0000FFFF   ; reset 2^48 - 3
        WRMSR32 MSR_DS_AREA, ds_area
        WRMSR32 0x38F, 0
        WRMSR32 0xC1, 0xFFFFFFFF        ; 2^48 - 1
        WRMSR32 0x186, 0xC0 | (0x01 << 8) | (1 << 16) | (1 << 17) | (1 << 22)
        WRMSR32 0x3F1, 1                ; PEBS on PMC0
        WRMSR32 MSR_DEBUGCTL, 1 << 12   ; FREEZE_PERFMON_ON_PMI
        mov ebx, 0xB0B0                 ; known values for the record's register fields
        mov esi, 0x5151
        mov edi, 0xD1D1
        mov ebp, 0xBBBB
        mov [esp_at_i1], esp
        sti
        WRMSR32 0x38F, 1                ; counted: wraps PMC0; leaves ECX = 0x38F, EDX = 0
i1:     mov eax, 1
i2:     mov eax, 2
i3:     mov eax, 3
i4:     mov eax, 4
i5:     mov eax, 5
i6:     mov eax, 6
i7:     mov eax, 7
i8:     mov eax, 8
        cli
        WRMSR32 0x38F, 0
        WRMSR32 0x3F1, 0
        WRMSR32 MSR_DEBUGCTL, 0
        call dump_pebs
        CHECK_EQ dword [pmi_count], 1, "one PMI: the PEBS buffer reached its threshold"
        CHECK_EQ dword [pmi_eip], i6, "PMI frame EIP = i6 (after the 2nd record's instruction i5)"
        mov eax, [pmi_status_hi]
        and eax, 1 << (62 - 32)
        CHECK_EQ eax, 1 << (62 - 32), "PMI: GLOBAL_STATUS.OvfBuffer (bit 62)"
        mov eax, [ds_area + 0x28]
        sub eax, pebs_buffer
        mov ecx, [rec]
        add ecx, ecx
        CHECK_EQ eax, ecx, "PEBS index = base + 2 records"
        mov esi, pebs_buffer
        CHECK_EQ dword [esi + 0x08], i2, "record 1: RIP = i2 (after the event i1; the enabling WRMSR overflowed PMC0)"
        CHECK_EQ dword [esi + 0x10], 1, "record 1: EAX = 1 (the state after i1)"
        CHECK_EQ dword [esi + 0x90], 1, "record 1: 90H = PMC0 (the overflowed counter)"
        CHECK_EQ dword [esi + 0x18], 0xB0B0, "record 1: EBX at 18H"
        CHECK_EQ dword [esi + 0x20], 0x38F, "record 1: ECX at 20H"
        CHECK_EQ dword [esi + 0x28], 0, "record 1: EDX at 28H"
        CHECK_EQ dword [esi + 0x30], 0x5151, "record 1: ESI at 30H"
        CHECK_EQ dword [esi + 0x38], 0xD1D1, "record 1: EDI at 38H"
        CHECK_EQ dword [esi + 0x40], 0xBBBB, "record 1: EBP at 40H"
        mov eax, [esp_at_i1]
        CHECK_EQ dword [esi + 0x48], eax, "record 1: ESP at 48H"
        CHECK_EQ dword [esi + 0x50], 0, "record 1: R8 = 0 outside IA-32e mode"
        add esi, [rec]
        CHECK_EQ dword [esi + 0x08], i6, "record 2: RIP = i6"
        CHECK_EQ dword [esi + 0x10], 5, "record 2: EAX = 5"
        cmp dword [fmt], 3
        jb .no_eventing_ip
        CHECK_EQ dword [esi + 0xB0], i5, "record 2 (format 3): EventingIP = i5"
        mov eax, [esi + 0xB8]
        or eax, [esi + 0xBC]
        CHECK_EQ eax, 0, "record 2 (format 3): TX abort information = 0"
        mov edi, esi
        sub edi, [rec]                  ; record 1
        mov eax, [esi + 0xC0]
        mov edx, [esi + 0xC4]
        sub eax, [edi + 0xC0]
        sbb edx, [edi + 0xC4]           ; edx:eax = TSC(record 2) - TSC(record 1)
        test edx, edx
        setz cl
        test eax, eax
        setnz ch
        and cl, ch                      ; 0 < difference < 2^32
        movzx eax, cl
        CHECK_EQ eax, 1, "records (format 3): the TSC at C0H moves forward from record 1 to record 2"
.no_eventing_ip:
        mov ecx, 0xC1
        rdmsr
        CHECK_EQ eax, 0xFFFFFFFD, "PMC0 = the reset value 2^48 - 3 (frozen by the PMI)"
        ret

; Book-style dump: the PEBS fields of the DS area, then RIP/EAX/90H of each record.
dump_pebs:
        pushad
        PRINT "PEBS: base="
        mov eax, [ds_area + 0x20]
        PRINT_HEX32
        PRINT " index="
        mov eax, [ds_area + 0x28]
        PRINT_HEX32
        PRINT " max="
        mov eax, [ds_area + 0x30]
        PRINT_HEX32
        PRINT " threshold="
        mov eax, [ds_area + 0x38]
        PRINT_HEX32
        NEWLINE
        mov esi, pebs_buffer
.r:
        cmp esi, [ds_area + 0x28]
        jae .done
        PRINT "  rip="
        mov eax, [esi + 0x08]
        PRINT_HEX32
        PRINT " eax="
        mov eax, [esi + 0x10]
        PRINT_HEX32
        PRINT " status="
        mov eax, [esi + 0x90]
        PRINT_HEX32
        NEWLINE
        add esi, [rec]
        jmp .r
.done:
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
        mov ecx, 0x390                  ; clear OvfBuffer
        xor eax, eax
        mov edx, 1 << (62 - 32)
        wrmsr
        and dword [LVT_PERFMON], ~(1 << 16)
        APIC_EOI
        ret

section .data
align 8
ds_area:        times 0x60 db 0
fmt:            dd 0
rec:            dd 0xB0
pmi_count:      dd 0
pmi_eip:        dd 0
pmi_status_hi:  dd 0
esp_at_i1:      dd 0
align 64
pebs_buffer:    times 4 * 0xC8 db 0

%include "end.inc"
