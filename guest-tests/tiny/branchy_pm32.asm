; branchy_pm32 (and branchy_lm64, which includes this file in long mode): a branch-heavy
; workload for vbts record's differential test against QEMU and for benchmarks.
; 4000 iterations of: an LCG step (x = x * 1103515245 + 12345, value = x >> 16); a Jcc on the
; value's low bit (odd: sum += value, else sum ^= value); an indirect call through a 4-entry
; table by value & 3 (f0: sum += 1; f1: sum = rol(sum, 3); f2: call leaf, sum += value;
; f3: LOOP three times, sum += 3 + 2 + 1); a direct call to leaf (sum += 1) when bit 8 of
; the value is clear; and when the counter (4000 down to 1) is a multiple of 256 (15 times),
; a UD2 whose #UD handler skips it and an INT 0x40 whose handler adds 0x1000 to the saved sum.
; The sum is 0x348a2d73: that Python model of the loop, run over the same 4000 iterations.
; Expected: status 1, output branchy.expected.
%include "rt.inc"

%define ITER        4000
%define SUM         0x348a2d73
%if RT_LONG_MODE
  %define XAX rax
  %define XCX rcx
  %define XDX rdx
  %define XDI rdi
%else
  %define XAX eax
  %define XCX ecx
  %define XDX edx
  %define XDI edi
%endif

main:
        SET_HANDLER 6, ud_handler
        SET_HANDLER 0x40, int_handler
        mov esi, 12345
        xor edi, edi
        mov ebp, ITER
.loop:
        imul esi, esi, 1103515245
        add esi, 12345
        mov eax, esi
        shr eax, 16
        test eax, 1
        jz .even
        add edi, eax
        jmp .next
.even:
        xor edi, eax
.next:
        mov ecx, eax
        and ecx, 3
        mov edx, [fn_table + XCX*4]
        call XDX
        test eax, 0x100
        jnz .skip
        call leaf
.skip:
        test ebp, 0xFF
        jnz .no_event
        ud2                             ; #UD: ud_handler skips these 2 bytes
        int 0x40
.no_event:
        dec ebp
        jnz .loop
        mov eax, SUM                    ; zero-extended in 64-bit code
        CHECK_EQ XDI, XAX, "checksum after 4000 iterations"
        mov eax, [ud_count]
        CHECK_EQ XAX, ITER / 256, "ud2 handled 15 times"
        ret

f0:     add edi, 1
        ret
f1:     rol edi, 3
        ret
f2:     call leaf
        add edi, eax
        ret
f3:     mov ecx, 3
.again: add edi, ecx
        loop .again
        ret
leaf:   inc edi
        ret

ud_handler:
        inc dword [ud_count]
%if RT_LONG_MODE
        add qword [rbx + F64_RIP], 2
%else
        add dword [ebx + F32_EIP], 2
%endif
        ret

int_handler:
%if RT_LONG_MODE
        add dword [rbx + F64_RDI], 0x1000
%else
        add dword [ebx + F32_EDI], 0x1000
%endif
        ret

section .data
fn_table:       dd f0, f1, f2, f3
ud_count:       dd 0

%include "end.inc"
