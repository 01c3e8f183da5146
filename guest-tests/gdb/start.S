/* start.S: Multiboot v1 entry of the C guest GDB's tests debug (gdb_demo.c).
   Loaded at 1 MiB like every guest image (docs/guest-abi.md); a flat 32-bit
   protected-mode environment as Multiboot leaves it: no IDT, interrupts off. */
        .section .multiboot, "a"
        .align 4
        .long 0x1BADB002                /* magic */
        .long 0x00000003                /* flags: page-aligned modules, memory info */
        .long -(0x1BADB002 + 0x00000003)

        .text
        .globl _start
_start:
        movl $stack_top, %esp
        call main
        /* isa-debug-exit: status (v << 1) | 1 */
        movw $0xf4, %dx
        outl %eax, %dx
1:      hlt
        jmp 1b

        .bss
        .align 16
        .space 16384
stack_top:
