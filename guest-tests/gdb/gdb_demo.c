// gdb_demo.c: the guest GDB's tests debug (scripts/gdb-test.py, ctest label
// gdb; docs/gdb.md).  Compiled C with symbols and line numbers, so that
// `break`, `step`, `finish`, watchpoints and `record function-call-history`
// have functions and lines to show.  It prints to COM1 and exits through
// isa-debug-exit with 0 (status 1) when every value is what it should be.

#define COM1 0x3F8

static inline void outb(unsigned short port, unsigned char v) {
  __asm__ volatile("outb %0, %1" : : "a"(v), "Nd"(port));
}

static void putc_com1(char c) { outb(COM1, (unsigned char)c); }

static void puts_com1(const char* s) {
  while (*s) putc_com1(*s++);
}

static void put_dec(unsigned v) {
  char buf[12];
  int n = 0;
  do {
    buf[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n) putc_com1(buf[--n]);
}

// What the tests watch and set.
volatile unsigned counter;  // written once per step() call: a write watchpoint
volatile unsigned release;  // the Ctrl-C test sets it to 1 to end the spin
volatile unsigned spin_limit = 2000000;  // the Ctrl-C test makes it endless
volatile unsigned char leaf_byte;        // leaf's first code byte, as the guest reads it
volatile unsigned nap;  // a test sets it to 1: the guest halts for good with interrupts on (none come)

__attribute__((noinline)) unsigned leaf(unsigned x) { return x * 3 + 1; }

__attribute__((noinline)) unsigned middle(unsigned x) { return leaf(x) + leaf(x + 1); }

__attribute__((noinline)) void step(unsigned i) { counter = counter + middle(i); }

// Spins until a debugger sets `release` (or `spins` is exhausted).
__attribute__((noinline)) unsigned spin(unsigned spins) {
  unsigned n = 0;
  while (!release && n < spins) n++;
  return n;
}

int main(void) {
  puts_com1("gdb_demo: start\n");
  // A debugger's breakpoint on leaf must not show in the guest's own reads.
  leaf_byte = *(volatile const unsigned char*)&leaf;
  for (unsigned i = 0; i < 3; i++) step(i);
  // middle(i) = leaf(i) + leaf(i+1) = (3i+1) + (3i+4) = 6i+5: 5 + 11 + 17 = 33.
  puts_com1("counter=");
  put_dec(counter);
  putc_com1('\n');
  // Without a debugger the spin ends by itself; the Ctrl-C test sets
  // `release` and sees the loop end early.
  const unsigned n = spin(spin_limit);
  puts_com1(release ? "released\n" : "not released\n");
  (void)n;
  if (nap) {
    // Nothing is programmed to interrupt: the CPU waits in HLT until a
    // debugger's Ctrl-C stops it there.
    puts_com1("napping\n");
    __asm__ volatile("sti; hlt; cli");
  }
  return counter == 33 ? 0 : 1;
}
