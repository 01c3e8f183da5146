#include "vcpu/pic8259.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace vbts::vcpu {
namespace {

// The PC BIOS's initialisation (master vectors 08H-0FH, slave 70H-77H,
// cascade on IRQ 2, 8086 mode), then every input unmasked.
void BiosInit(Pic8259& p, uint8_t master_base = 0x08, uint8_t slave_base = 0x70) {
  p.Write(0x20, 0x11);  // ICW1: cascade, ICW4 follows
  p.Write(0x21, master_base);
  p.Write(0x21, 0x04);  // ICW3: slave on input 2
  p.Write(0x21, 0x01);  // ICW4: 8086 mode
  p.Write(0xA0, 0x11);
  p.Write(0xA1, slave_base);
  p.Write(0xA1, 0x02);
  p.Write(0xA1, 0x01);
  p.Write(0x21, 0x00);
  p.Write(0xA1, 0x00);
}

TEST(Pic8259Test, EdgeRequestIsAcknowledgedWithItsVectorAndEoiEndsIt) {
  Pic8259 p;
  BiosInit(p);
  EXPECT_FALSE(p.Output());
  p.SetLine(1, true);
  EXPECT_TRUE(p.Output());
  EXPECT_EQ(p.Read(0x20), 0x02);  // IRR
  EXPECT_EQ(p.Acknowledge(), 0x09);
  EXPECT_FALSE(p.Output());
  p.Write(0x20, 0x0B);            // OCW3: read ISR
  EXPECT_EQ(p.Read(0x20), 0x02);
  p.Write(0x20, 0x20);            // non-specific EOI
  EXPECT_EQ(p.Read(0x20), 0x00);
  // The line is still high: no new request without a new rising edge.
  EXPECT_FALSE(p.Output());
  p.SetLine(1, false);
  p.SetLine(1, true);
  EXPECT_TRUE(p.Output());
}

TEST(Pic8259Test, SlaveRequestsCascadeThroughMasterInputTwo) {
  Pic8259 p;
  BiosInit(p);
  p.SetLine(11, true);  // slave input 3
  EXPECT_TRUE(p.Output());
  EXPECT_EQ(p.Acknowledge(), 0x73);
  // In service on both chips: master input 2, slave input 3.
  p.Write(0x20, 0x0B);
  p.Write(0xA0, 0x0B);
  EXPECT_EQ(p.Read(0x20), 0x04);
  EXPECT_EQ(p.Read(0xA0), 0x08);
  p.Write(0xA0, 0x20);
  p.Write(0x20, 0x20);
  EXPECT_EQ(p.Read(0x20), 0x00);
  EXPECT_EQ(p.Read(0xA0), 0x00);
}

TEST(Pic8259Test, PriorityNestingAndMasks) {
  Pic8259 p;
  BiosInit(p);
  p.SetLine(3, true);
  EXPECT_EQ(p.Acknowledge(), 0x0B);
  p.SetLine(5, true);  // lower priority than IRQ 3 in service: waits
  EXPECT_FALSE(p.Output());
  p.SetLine(1, true);  // higher: interrupts the service of IRQ 3
  EXPECT_TRUE(p.Output());
  EXPECT_EQ(p.Acknowledge(), 0x09);
  p.Write(0x20, 0x20);  // ends IRQ 1 (the highest in service)
  EXPECT_FALSE(p.Output());
  p.Write(0x20, 0x20);  // ends IRQ 3
  EXPECT_TRUE(p.Output());
  p.Write(0x21, 0x20);  // IMR masks IRQ 5
  EXPECT_EQ(p.Read(0x21), 0x20);
  EXPECT_FALSE(p.Output());
  p.Write(0x21, 0x00);
  EXPECT_EQ(p.Acknowledge(), 0x0D);
  // Both inputs at once: IRQ 0 first.
  p.Write(0x20, 0x20);
  p.SetLine(0, true);
  p.SetLine(4, true);
  EXPECT_EQ(p.Acknowledge(), 0x08);
  p.Write(0x20, 0x60);  // specific EOI of IRQ 0
  EXPECT_EQ(p.Acknowledge(), 0x0C);
}

TEST(Pic8259Test, LevelInputsFollowTheElcr) {
  Pic8259 p;
  BiosInit(p);
  p.Write(0x4D1, 0xFF);  // slave: all but the fixed edge inputs 8 and 13
  EXPECT_EQ(p.Read(0x4D1), 0xDE);
  p.Write(0x4D0, 0xFF);
  EXPECT_EQ(p.Read(0x4D0), 0xF8);
  p.SetLine(11, true);
  EXPECT_EQ(p.Acknowledge(), 0x73);
  p.Write(0xA0, 0x20);
  p.Write(0x20, 0x20);
  // Still high: requested again after the EOI.
  EXPECT_TRUE(p.Output());
  // The line falls before the acknowledge: the slave has nothing, but the
  // master latched the cascade input's edge, so the CPU gets the slave's
  // spurious vector (IRQ 15), as on the PC.
  p.SetLine(11, false);
  EXPECT_TRUE(p.Output());
  EXPECT_EQ(p.Acknowledge(), 0x77);
  p.Write(0xA0, 0x0B);
  EXPECT_EQ(p.Read(0xA0), 0x00);  // nothing in service on the slave
}

TEST(Pic8259Test, SpuriousAndPoll) {
  Pic8259 p;
  BiosInit(p);
  // A request that vanished (level input dropped) before INTA: IRQ 7's vector.
  EXPECT_EQ(p.Acknowledge(), 0x0F);
  p.Write(0x20, 0x0B);
  EXPECT_EQ(p.Read(0x20), 0x00);  // and nothing in service
  // Poll mode: the read acknowledges, 80H | input.
  p.SetLine(6, true);
  p.Write(0x20, 0x0C);
  EXPECT_EQ(p.Read(0x20), 0x86);
  p.Write(0x20, 0x0C);
  EXPECT_EQ(p.Read(0x20), 0x00);  // nothing more
}

TEST(Pic8259Test, AutomaticEoiAndRotation) {
  Pic8259 p;
  p.Write(0x20, 0x13);  // ICW1: single, ICW4
  p.Write(0x21, 0x20);
  p.Write(0x21, 0x03);  // ICW4: automatic EOI, 8086
  p.Write(0x21, 0x00);
  p.SetLine(3, true);
  EXPECT_EQ(p.Acknowledge(), 0x23);
  p.Write(0x20, 0x0B);
  EXPECT_EQ(p.Read(0x20), 0x00);  // nothing in service with automatic EOI
  // Set priority: IRQ 4 lowest, so IRQ 5 beats IRQ 0.
  p.Write(0x20, 0xC4);
  p.SetLine(0, true);
  p.SetLine(5, true);
  EXPECT_EQ(p.Acknowledge(), 0x25);
  EXPECT_EQ(p.Acknowledge(), 0x20);
}

TEST(Pic8259Test, ResetStateAndUnknownPorts) {
  Pic8259 p;
  // Power-up: not initialised, vector base 0, nothing masked.
  p.SetLine(0, true);
  EXPECT_TRUE(p.Output());
  EXPECT_EQ(p.Acknowledge(), 0x00);
  EXPECT_EQ(p.Read(0x21), 0x00);
  EXPECT_EQ(p.Read(0x22), 0xFF);
  p.SetLine(16, true);  // ignored
  p.SetLine(99, true);
  EXPECT_EQ(p.master().irr, 0x00);
}

TEST(Pic8259Test, StateRoundTrips) {
  Pic8259 p;
  BiosInit(p, 0x20, 0x28);
  p.Write(0x21, 0xFA);
  p.SetLine(1, true);
  p.SetLine(10, true);
  EXPECT_EQ(p.Acknowledge(), 0x2A);
  Pic8259 q;
  q.SetState(p.master(), p.slave());
  for (Pic8259* x : {&p, &q}) {
    x->Write(0x20, 0x0B);
    x->Write(0xA0, 0x0B);
  }
  EXPECT_EQ(q.Read(0x20), p.Read(0x20));
  EXPECT_EQ(q.Read(0xA0), p.Read(0xA0));
  EXPECT_EQ(q.Read(0x21), 0xFA);
  EXPECT_EQ(q.master().irq_base, 0x20);
  EXPECT_EQ(q.slave().irq_base, 0x28);
  EXPECT_EQ(q.slave().isr, 0x04);
}

}  // namespace
}  // namespace vbts::vcpu
