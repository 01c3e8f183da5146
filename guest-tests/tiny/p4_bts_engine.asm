; p4_bts_engine: what the Win32 BTS capture engine of the project's material does on the
; Pentium 4 it was written for (NetBurst, SDM vol. 3B 17.12), done as a guest kernel would:
; it unmasks the LAPIC's performance-counter LVT with its vector, builds the 32-bit DS buffer
; management area with an interrupt threshold below the absolute maximum, turns BTS on in
; interrupt mode with MSR_DEBUGCTLA's NetBurst bits (TR 2, BTS 3, BTINT 4 = 0x1C), and on
; every BTS interrupt saves the records and resets the index. The workload is 20 jumps
; j0 -> j1 -> ... -> j20, 2 bytes apart.
;
; Which CPU: the engine checks CPUID.1 for family 0FH (NetBurst). On any other family
; (westmere: IA32_DEBUGCTL with TR/BTS/BTINT at bits 6-8, SDM 17.4.1) bits 2-4 are reserved,
; so the WRMSR of 0x1C must #GP; the image checks exactly that and stops there.
;
; NetBurst expectations (buffer: 8 records of 12 bytes; threshold = base + 6 records;
; interrupt mode: a PMI when a record's end reaches the threshold, docs/pmu-model.md; the
; PMI comes at the next instruction boundary and masks LVTPC, SDM vol. 3A 10.5.1; the
; handler raw_isr has no branch but its IRETD at isr_iret, and turns BTS off while it works):
;   batch 1: (j0,j1) (j1,j2) (j2,j3) (j3,j4) (j4,j5) (j5,j6) - the 6th reaches the threshold;
;            the PMI before j6: (j6,raw_isr) is stored too (7 records; its own end is past the
;            threshold, but LVTPC is masked until the handler unmasks it: no second PMI);
;   batch 2: (isr_iret,j6) (j6,j7) .. (j10,j11), then (j11,raw_isr): 7 records;
;   batch 3: (isr_iret,j11) (j11,j12) .. (j15,j16), then (j16,raw_isr): 7 records;
;   tail:    (isr_iret,j16) (j16,j17) (j17,j18) (j18,j19) (j19,j20): 5 records, saved after
;            BTS is turned off at j20 - 26 records, 3 interrupts returning to j6, j11, j16.
; Expected: status 1 under `--cpu=pentium4` and under westmere (each checks its own CPU);
; QEMU TCG: no DS, SKIP (155).
%include "rt.inc"
%include "debug32.inc"

%define NREC            8
%define THRESHOLD       6
%define DEBUGCTLA_BTS   ((1 << 2) | (1 << 3) | (1 << 4))   ; TR | BTS | BTINT (NetBurst layout)
%define NSAVE           26

main:
        BTS_REQUIRE
        NETBURST_BRANCH "the Win32 BTS engine: not a GenuineIntel CPU", netburst
        ; --- not NetBurst: the NetBurst bits are reserved in IA32_DEBUGCTL
        SET_HANDLER 13, gp_handler
        mov dword [gp_count], 0
wrmsr_site:
        WRMSR32 MSR_DEBUGCTL, DEBUGCTLA_BTS
        CHECK_EQ dword [gp_count], 1, "not NetBurst: WRMSR DEBUGCTL, 0x1C (NetBurst TR|BTS|BTINT) #GPs (reserved bits 2-4)"
        mov ecx, MSR_DEBUGCTL
        rdmsr
        CHECK_EQ eax, 0, "not NetBurst: DEBUGCTL unchanged (0)"
        ret

netburst:
        PASS "CPUID.1 family 0FH: NetBurst layout of MSR_DEBUGCTLA"
        RAW_GATE32 PMI_VEC, raw_isr
        APIC_ENABLE
        mov dword [LVT_PERFMON], PMI_VEC
        sti
        CHECK_EQ dword [dbg_rec], 12, "32-bit DS format: 12-byte BTS records (no DTES64)"
        mov eax, bts_buffer
        mov ecx, NREC
        mov edx, THRESHOLD
        call dbg_ds_init32
        mov dword [save_ptr], save_area
        mov dword [cur_debugctl], DEBUGCTLA_BTS
        WRMSR32 MSR_DEBUGCTL, DEBUGCTLA_BTS
j0:     jmp j1
j1:     jmp j2
j2:     jmp j3
j3:     jmp j4
j4:     jmp j5
j5:     jmp j6
j6:     jmp j7
j7:     jmp j8
j8:     jmp j9
j9:     jmp j10
j10:    jmp j11
j11:    jmp j12
j12:    jmp j13
j13:    jmp j14
j14:    jmp j15
j15:    jmp j16
j16:    jmp j17
j17:    jmp j18
j18:    jmp j19
j19:    jmp j20
j20:    mov dword [cur_debugctl], 0
        WRMSR32 MSR_DEBUGCTL, 0
        cli
        call save_records                 ; the tail, as the engine does when it stops
        mov ecx, MSR_DEBUGCTL
        rdmsr
        CHECK_EQ eax, 0, "DEBUGCTLA reads back 0 after BTS off"
        CHECK_EQ dword [isr_count], 3, "3 BTS interrupts for 20 jumps (threshold 6 of 8 records)"
        CHECK_EQ dword [isr_eip + 0], j6, "interrupt 1 returns to j6"
        CHECK_EQ dword [isr_eip + 4], j11, "interrupt 2 returns to j11"
        CHECK_EQ dword [isr_eip + 8], j16, "interrupt 3 returns to j16"
        mov eax, [save_ptr]
        sub eax, save_area
        CHECK_EQ eax, NSAVE * 12, "26 records saved"
        ; every saved record against the expected table (from, to)
        xor ebx, ebx
        mov dword [bad_records], 0
.cmp:
        lea esi, [ebx + ebx * 2]
        shl esi, 2                        ; record ebx at 12 * ebx
        mov eax, [save_area + esi]
        cmp eax, [expected + ebx * 8]
        jne .bad
        mov eax, [save_area + esi + 4]
        cmp eax, [expected + ebx * 8 + 4]
        je .next
.bad:
        inc dword [bad_records]
        PRINT "record "
        mov eax, ebx
        PRINT_DEC
        PRINT ": from "
        mov eax, [save_area + esi]
        PRINT_HEX32
        PRINT " to "
        mov eax, [save_area + esi + 4]
        PRINT_HEX32
        PRINT ", expected "
        mov eax, [expected + ebx * 8]
        PRINT_HEX32
        PRINT " -> "
        mov eax, [expected + ebx * 8 + 4]
        PRINT_HEX32
        NEWLINE
.next:
        inc ebx
        cmp ebx, NSAVE
        jb .cmp
        CHECK_EQ dword [bad_records], 0, "every saved record is the expected (from, to) pair"
        ret

; save_records: appends the records [base, index) to save_area and resets the index to base.
; No branch but the CALL/RET around it (made with BTS off).
save_records:
        push esi
        push edi
        push ecx
        mov esi, [dbg_ds_area + 0]        ; BTS buffer base
        mov ecx, [dbg_ds_area + 4]        ; BTS index
        sub ecx, esi
        mov edi, [save_ptr]
        cld
        rep movsb
        mov [save_ptr], edi
        mov eax, [dbg_ds_area + 0]
        mov [dbg_ds_area + 4], eax        ; index = base
        pop ecx
        pop edi
        pop esi
        ret

; The BTS interrupt: BTS off, save and reset, unmask LVTPC, EOI, BTS back on, IRETD.
; Straight-line code: the copy is inlined (a CALL would be a branch... but BTS is off here;
; it is inlined anyway so that the handler's only branch while BTS is on is the IRETD).
raw_isr:
        push eax
        push ecx
        push edx
        push esi
        push edi
        mov ecx, MSR_DEBUGCTL
        xor eax, eax
        xor edx, edx
        wrmsr
        mov eax, [isr_count]
        mov ecx, [esp + 20]               ; frame EIP
        mov [isr_eip + eax * 4], ecx
        inc dword [isr_count]
        mov esi, [dbg_ds_area + 0]
        mov ecx, [dbg_ds_area + 4]
        sub ecx, esi
        mov edi, [save_ptr]
        cld
        rep movsb
        mov [save_ptr], edi
        mov eax, [dbg_ds_area + 0]
        mov [dbg_ds_area + 4], eax
        mov dword [LVT_PERFMON], PMI_VEC
        mov dword [LAPIC_BASE + LAPIC_EOI], 0
        mov ecx, MSR_DEBUGCTL
        mov eax, [cur_debugctl]
        xor edx, edx
        wrmsr
        pop edi
        pop esi
        pop edx
        pop ecx
        pop eax
isr_iret:
        iretd

; #GP on a CPU without the NetBurst layout: skip the 2-byte WRMSR.
        GP_SKIP_HANDLER                 ; gp_handler: skips the faulting WRMSR

section .data
align 4
isr_count:      dd 0
isr_eip:        times 8 dd 0
save_ptr:       dd 0
cur_debugctl:   dd 0
bad_records:    dd 0
expected:
        dd j0, j1, j1, j2, j2, j3, j3, j4, j4, j5, j5, j6, j6, raw_isr
        dd isr_iret, j6, j6, j7, j7, j8, j8, j9, j9, j10, j10, j11, j11, raw_isr
        dd isr_iret, j11, j11, j12, j12, j13, j13, j14, j14, j15, j15, j16, j16, raw_isr
        dd isr_iret, j16, j16, j17, j17, j18, j18, j19, j19, j20

section .bss
alignb 4096
bts_buffer:     resb NREC * 12
alignb 16
save_area:      resb (NSAVE + 8) * 12

%include "end.inc"
