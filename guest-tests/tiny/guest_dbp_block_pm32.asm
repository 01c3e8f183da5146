; guest_dbp_block_pm32: the guest's own data breakpoint hit by a store in the middle of a
; loop's block (SDM vol. 3B 17.2.4, 17.3.1.2: a data breakpoint is a trap, taken after the
; instruction that accessed, before the next one), 32-bit ring 0, nothing traced.
; The loop body (mov [watch], ecx; inc ebx; dec ecx; jnz) is one translated block under the
; TCG engine, which finds the boundary after the store by running it again alone
; (docs/tcg-engine.md, "Watched accesses"); under KVM the CPU or the tracer raises it.
;  - DR0 = watch, DR7 = L0 | RW0=01 (write) | LEN0=11 (dword), ECX = 5, EBX = 0.
;  - each of the 5 iterations stores to watch: 5 #DBs, each with EIP = after_store (the
;    `inc ebx` has not run) and EBX = the iterations finished before it, 0, 1, 2, 3, 4:
;    their sum 10; DR6.B0 in each.
;  - after the loop EBX = 5 and watch = 1 (the last ECX stored).
; All DR7 writes go through one MOV DR7 (set_dr7) and the image has no CPUID, as
; guest_dbp_pm32 (a host that does not raise the guest's data breakpoints guards that one
; instruction). Expected: status 1, output guest_dbp_block_pm32.expected (QEMU TCG too).
%include "rt.inc"

main:
        SET_HANDLER 1, loop_db_handler
        mov eax, watch
        mov dr0, eax
        mov eax, (1 << 0) | (01b << 16) | (11b << 18)
        call set_dr7
        mov ecx, 5
        xor ebx, ebx
store_loop:
        mov [watch], ecx
after_store:
        inc ebx
        dec ecx
        jnz store_loop
        xor eax, eax
        call set_dr7
        CHECK_EQ ebx, 5, "EBX = 5 after the loop"
        CHECK_EQ dword [hits], 5, "five #DBs, one for each store"
        CHECK_EQ dword [eip_misses], 0, "each trap after the store: EIP = after_store"
        CHECK_EQ dword [ebx_sum], 10, "EBX at the traps 0+1+2+3+4: the inc after the store had not run"
        CHECK_EQ dword [b0_misses], 0, "DR6.B0 in each"
        CHECK_EQ dword [watch], 1, "watch holds the last ECX stored"
        ret

; #DB (ebx = frame, idt32.inc): counts it, checks its EIP and DR6.B0, adds the frame's EBX,
; clears DR6's B0-B3/BS (sticky, SDM vol. 3B 17.2.3). Clobbers eax.
loop_db_handler:
        inc dword [hits]
        cmp dword [ebx + F32_EIP], after_store
        je .eip_ok
        inc dword [eip_misses]
.eip_ok:
        mov eax, [ebx + F32_EBX]
        add [ebx_sum], eax
        mov eax, dr6
        test eax, 1
        jnz .b0_ok
        inc dword [b0_misses]
.b0_ok:
        mov eax, 0xFFFF0FF0
        mov dr6, eax
        ret

set_dr7:                                ; EAX -> DR7: the image's one MOV DR7
        mov dr7, eax
        ret

section .data
align 4
watch:          dd 0
hits:           dd 0
eip_misses:     dd 0
ebx_sum:        dd 0
b0_misses:      dd 0

%include "end.inc"
