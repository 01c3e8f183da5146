; s3_pm32: suspend to RAM and resume, as kvm-unit-tests' s3.c does it (ACPI 6.4 7.4.2 and 16.3;
; the FACS waking vector, 5.2.10), with its checks made visible. Ring 0, pm32.
; 1. The FADT from the tables (acpi32.inc), its FACS (FIRMWARE_CTRL).
; 2. A real-mode stub copied to 0x1000 becomes the FACS's firmware waking vector: the firmware's
;    resume path starts it with CS:IP = 0100:0000. It reads PM1a_STS (its port stored after the
;    code) and writes 0 to the debug-exit port if WAK_STS (bit 15) is set, else 1.
; 3. The RTC alarm as the wake event: wait for UIP to rise and fall (an update passed), read
;    register C, alarm seconds/minutes/hours = C0H (any), AIE in register B.
; 4. PM1a_CNT = SLP_EN | SLP_TYP 1 (S3 in QEMU's PM, which kvm-unit-tests hard-codes): the
;    machine sleeps until the next second, then resumes at the stub: status 1 (WAK_STS set). If
;    it is still running after the write, the image FAILs.
; Expected: status 1 under vbts. QEMU TCG 7.2 runs SeaBIOS's resume path, which needs its own
; boot state (qemu = no; kvm-unit-tests s3 fails under QEMU TCG too, docs/compatibility.md).
%include "rt.inc"
%include "cmos.inc"
%include "acpi32.inc"

%define STUB    0x1000

main:
        call acpi_find_fadt32
        test ebx, ebx
        jnz .fadt
        FINISH
.fadt:
        mov edi, [ebx + 36]             ; FIRMWARE_CTRL: the FACS
        cmp dword [edi], 'FACS'
        REPORT "FACS at the FADT's FIRMWARE_CTRL"
        mov dword [edi + 12], STUB      ; firmware_waking_vector
        ; the stub, and PM1a_EVT_BLK's port after it
        mov esi, stub_start
        mov edi, STUB
        mov ecx, stub_end - stub_start
        rep movsb
        mov eax, [ebx + 56]             ; PM1a_EVT_BLK
        mov [STUB + (stub_port - stub_start)], ax

        ; the RTC alarm: every second
.uip_rise:
        CMOS_READ 0x0A
        test al, 0x80
        jz .uip_rise
.uip_fall:
        CMOS_READ 0x0A
        test al, 0x80
        jnz .uip_fall
        PASS "RTC: UIP rose and fell (an update passed)"
        CMOS_READ 0x0C
        CMOS_WRITE 0x01, 0xC0
        CMOS_WRITE 0x03, 0xC0
        CMOS_WRITE 0x05, 0xC0
        CMOS_READ 0x0B
        or al, 0x20                     ; AIE
        mov ah, al
        CMOS_WRITE 0x0B, ah

        PRINTLN "suspending to RAM; the stub at 0x1000 reports WAK_STS through port 0xF4"
        mov edx, [ebx + 64]             ; PM1a_CNT_BLK
        mov ax, 0x2400                  ; SLP_EN | SLP_TYP 1
        out dx, ax
        mov ecx, 100000000
.still:
        dec ecx
        jnz .still
        FAIL "the machine is still running after the S3 request"
        FINISH

        bits 16
stub_start:
        mov dx, [cs:stub_port - stub_start]
        in ax, dx
        shr ax, 15                      ; WAK_STS
        xor ax, 1                       ; 0: it was set
        movzx eax, ax
        out 0xF4, eax
.halt:
        hlt
        jmp .halt
stub_port:      dw 0
stub_end:
        bits 32

%include "end.inc"
