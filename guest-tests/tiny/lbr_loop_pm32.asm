; lbr_loop_pm32: the LBR-only traced-throughput workload of docs/benchmarks.md (the loop of
; traced_loop_pm32 with only DEBUGCTL.LBR on: no BTS, no counters), with its exact results
; (debug32.inc's LBR_LOOP_CHECKED, which lbr_xbp_pm32 runs too).
; ITER = 1 000 000 iterations of
;   .loop: add edi, ebp | call leaf -> leaf: add edi, 3 | ret | xor edi, 0x55 | test ebp, 1
;          | jz .even | inc edi (odd EBP only) | .even: dec ebp | jnz .loop
; with EBP = ITER down to 1.
;   taken branches = ITER (call) + ITER (ret) + ITER / 2 (jz on even EBP) + ITER - 1 (jnz)
;                  = 3 499 999: LBR TOS = (TOS before + 3 499 999) mod 16 = TOS before + 15 mod 16;
;                  FROM[TOS] = the last taken branch, leaf's RET (the last jz and jnz are not
;                  taken: EBP = 1, then 0), TO[TOS] = the instruction after the CALL.
;   EDI = the loop's checksum, 0x6aae1200 (as traced_loop_pm32).
; Expected: status 1 under vbts (westmere); QEMU TCG has no PDCM: SKIP (155).
%include "rt.inc"
%include "debug32.inc"

main:
        LBR_REQUIRE
        LBR_LOOP_CHECKED
        ret

%include "end.inc"
