; cpuid: informational. Prints the vendor string and leaf 1 EAX/EBX/ECX/EDX; the only check is
; that leaf 0 reports at least leaf 1. Expected: status 1; output has the lines listed in tests.cfg.
%include "rt.inc"

main:
        xor eax, eax
        cpuid
        mov [vendor], ebx               ; vendor string is EBX, EDX, ECX
        mov [vendor + 4], edx
        mov [vendor + 8], ecx
        mov [max_leaf], eax
        PRINT "cpuid: vendor "
        push esi
        mov esi, vendor
        call rt_puts32
        pop esi
        PRINT " max basic leaf "
        mov eax, [max_leaf]
        PRINT_HEX32
        NEWLINE
        mov eax, 1
        cpuid
        PRINT "cpuid: leaf 1 eax="
        PRINT_HEX32
        PRINT " ebx="
        mov eax, ebx
        PRINT_HEX32
        PRINT " ecx="
        mov eax, ecx
        PRINT_HEX32
        PRINT " edx="
        mov eax, edx
        PRINT_HEX32
        NEWLINE
        cmp dword [max_leaf], 1
        CHECK_CC ae, "cpuid max basic leaf >= 1"
        ret

section .data
vendor:         times 13 db 0           ; 12 characters + NUL
align 4
max_leaf:       dd 0

%include "end.inc"
