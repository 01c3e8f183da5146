; smc_lbr_pm32: self-modifying code under LBR tracing. The guest calls `patchme`, whose first
; instruction is `jmp short .a` (a block of its own), then rewrites that JMP's displacement so
; that it goes to `.b`, and calls it again. The TCG engine classifies a block's last instruction
; from a cached decoding (docs/tcg-engine.md, "Block-level tracing"): the guest's store must make
; it decode the new JMP (SDM vol. 3A 11.6: a store to code is seen by the next fetch).
; The LBR stack after the second call (16 entries, TOS = the last branch):
;   TOS-2: FROM call2 (the second CALL)  TO patchme
;   TOS-1: FROM patchme (the JMP)        TO patchme.b   (patchme.a with a stale decoding)
;   TOS:   FROM patchme.b (its RET)      TO after2
; 7 checks, each entry's FROM and TO and the JMP's first run. Expected: status 1 under vbts
; (westmere); QEMU TCG has no LBRs (no PDCM): SKIP (155).
%include "rt.inc"
%include "debug32.inc"

main:
        LBR_REQUIRE
        WRMSR32 MSR_DEBUGCTL, DBG_LBR
        call patchme                    ; jmp .a: EAX = 1
        mov esi, eax
        mov byte [patchme + 1], patchme.b - (patchme + 2)
call2:  call patchme                    ; jmp .b: EAX = 2
after2: mov edi, eax
        WRMSR32 MSR_DEBUGCTL, 0
        CHECK_EQ esi, 1, "the first call ran the JMP to .a"
        CHECK_EQ edi, 2, "the second call ran the rewritten JMP to .b"
        mov ecx, 0x1C9
        rdmsr
        and eax, 15
        mov ebx, eax                    ; TOS
        ; TOS: the RET at .b
        lea ecx, [0x680 + ebx]
        rdmsr
        CHECK_EQ eax, patchme.b_ret, "LBR[TOS] FROM = patchme.b's RET"
        ; TOS-1: the JMP
        dec ebx
        and ebx, 15
        lea ecx, [0x680 + ebx]
        rdmsr
        CHECK_EQ eax, patchme, "LBR[TOS-1] FROM = the rewritten JMP"
        lea ecx, [0x6C0 + ebx]
        rdmsr
        CHECK_EQ eax, patchme.b, "LBR[TOS-1] TO = .b, its new target"
        ; TOS-2: the second CALL
        dec ebx
        and ebx, 15
        lea ecx, [0x680 + ebx]
        rdmsr
        CHECK_EQ eax, call2, "LBR[TOS-2] FROM = the second CALL"
        lea ecx, [0x6C0 + ebx]
        rdmsr
        CHECK_EQ eax, patchme, "LBR[TOS-2] TO = patchme"
        ret

patchme:
        jmp short .a                    ; rewritten to jmp short .b
.a:     mov eax, 1
        ret
.b:     mov eax, 2
.b_ret: ret

%include "end.inc"
