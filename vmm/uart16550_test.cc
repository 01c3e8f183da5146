// uart16550_test.cc: unit tests for the 16550A model: polling driver sequence, reset values and every register.
#include "vmm/uart16550.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "base/status_macros.h"
#include "base/testing/status_matchers.h"

namespace vbts::vmm {
namespace {

class UartTest : public ::testing::Test {
 protected:
  UartTest() : uart_([this](uint8_t b) { out_.push_back(static_cast<char>(b)); }) {
    VBTS_CHECK(bus_.Register(Uart16550::kCom1Port, Uart16550::kSize, &uart_, "com1").ok());
  }
  uint8_t In(uint16_t port) {
    uint8_t b = 0;
    VBTS_CHECK(bus_.Dispatch(port, 1, false, absl::MakeSpan(&b, 1)).ok());
    return b;
  }
  void Out(uint16_t port, uint8_t v) {
    VBTS_CHECK(bus_.Dispatch(port, 1, true, absl::MakeSpan(&v, 1)).ok());
  }
  std::string out_;
  Uart16550 uart_;
  PioBus bus_;
};

TEST_F(UartTest, ResetValues) {
  EXPECT_EQ(In(0x3F9), 0x00);  // IER
  EXPECT_EQ(In(0x3FA), 0x01);  // IIR: no interrupt, FIFOs off
  EXPECT_EQ(In(0x3FB), 0x00);  // LCR
  EXPECT_EQ(In(0x3FC), 0x08);  // MCR: OUT2
  EXPECT_EQ(In(0x3FD), 0x60);  // LSR: THRE | TEMT
  EXPECT_EQ(In(0x3FE), 0xB0);  // MSR: DCD | DSR | CTS
  EXPECT_EQ(In(0x3FF), 0x00);  // SCR
  EXPECT_EQ(uart_.divisor(), 0x000C);
  EXPECT_FALSE(uart_.InterruptPending());
}

TEST_F(UartTest, PollingDriverSequence) {
  Out(0x3F9, 0x00);  // IER: no interrupts
  Out(0x3FB, 0x80);  // DLAB
  Out(0x3F8, 0x01);  // DLL
  Out(0x3F9, 0x00);  // DLM
  Out(0x3FB, 0x03);  // 8N1, DLAB off
  Out(0x3FA, 0xC7);  // FIFO on, clear, 14-byte trigger
  Out(0x3FC, 0x0B);  // DTR | RTS | OUT2
  EXPECT_EQ(uart_.divisor(), 0x0001);
  for (char c : std::string("hi\n")) {
    int spins = 0;
    while ((In(0x3FD) & 0x20) == 0) ASSERT_LT(++spins, 10);
    Out(0x3F8, static_cast<uint8_t>(c));
  }
  EXPECT_EQ(out_, "hi\n");
  EXPECT_EQ(In(0x3FD), 0x60);
  EXPECT_EQ(In(0x3FA), 0xC1);  // FIFOs enabled, nothing pending
  EXPECT_EQ(In(0x3FB), 0x03);
  EXPECT_EQ(In(0x3FC), 0x0B);
}

TEST_F(UartTest, DlabSwitchesOffsets0And1ToDivisorLatch) {
  Out(0x3F9, 0x05);  // IER
  Out(0x3FB, 0x83);
  Out(0x3F8, 0x34);
  Out(0x3F9, 0x12);
  EXPECT_EQ(In(0x3F8), 0x34);
  EXPECT_EQ(In(0x3F9), 0x12);
  EXPECT_TRUE(out_.empty());  // DLL write did not transmit
  Out(0x3FB, 0x03);
  EXPECT_EQ(uart_.divisor(), 0x1234);
  EXPECT_EQ(In(0x3F9), 0x05);  // IER unchanged by the DLM write
}

TEST_F(UartTest, IerKeepsLow4Bits) {
  Out(0x3F9, 0xFF);
  EXPECT_EQ(In(0x3F9), 0x0F);
}

TEST_F(UartTest, ThreInterruptClearedByIirReadAndRearmedByThrWrite) {
  Out(0x3F9, 0x02);  // IER.THRI 0->1 with THR empty: interrupt
  EXPECT_TRUE(uart_.InterruptPending());
  EXPECT_EQ(In(0x3FA), 0x02);
  EXPECT_EQ(In(0x3FA), 0x01);  // the read cleared it
  EXPECT_FALSE(uart_.InterruptPending());
  Out(0x3F8, 'x');
  EXPECT_EQ(In(0x3FA), 0x02);
  Out(0x3F9, 0x00);
  EXPECT_EQ(In(0x3FA), 0x01);
  EXPECT_EQ(out_, "x");
}

TEST_F(UartTest, IrqLineFollowsIirAsLinuxsInterruptDrivenTransmitSeesIt) {
  // Linux's 8250 driver sends console output from its THRE interrupt: the
  // line rises when IER.THRI arms it with THR empty, falls when IIR is read
  // (the interrupt is taken), rises again after the next THR write.
  std::vector<bool> edges;
  uart_.SetIrq([&edges](bool level) { edges.push_back(level); });
  Out(0x3F9, 0x02);  // IER = THRI
  EXPECT_EQ(edges, std::vector<bool>({true}));
  EXPECT_EQ(In(0x3FA), 0x02);  // THRE: reading it clears it
  EXPECT_EQ(edges, std::vector<bool>({true, false}));
  Out(0x3F8, 'x');
  EXPECT_EQ(edges, std::vector<bool>({true, false, true}));
  Out(0x3F9, 0x00);  // IER = 0: nothing can be pending
  EXPECT_EQ(edges, std::vector<bool>({true, false, true, false}));
  EXPECT_EQ(out_, "x");
}

TEST_F(UartTest, ReceivedDataSetsDrAndRdiInterrupt) {
  Out(0x3F9, 0x01);  // IER.RDI
  EXPECT_EQ(In(0x3FA), 0x01);
  uart_.Receive('a');
  EXPECT_EQ(In(0x3FD), 0x61);
  EXPECT_EQ(In(0x3FA), 0x04);
  EXPECT_EQ(In(0x3F8), 'a');
  EXPECT_EQ(In(0x3FD), 0x60);
  EXPECT_EQ(In(0x3FA), 0x01);
}

TEST_F(UartTest, OverrunWithoutFifoSetsOeUntilLsrRead) {
  Out(0x3F9, 0x04);  // IER.RLSI
  uart_.Receive('a');
  uart_.Receive('b');
  EXPECT_EQ(In(0x3FA), 0x06);
  EXPECT_EQ(In(0x3FD), 0x63);  // DR | OE | THRE | TEMT
  EXPECT_EQ(In(0x3FD), 0x61);
  EXPECT_EQ(In(0x3FA), 0x01);
  EXPECT_EQ(In(0x3F8), 'b');
}

TEST_F(UartTest, FifoHolds16BytesAndTriggerLevelGatesRdi) {
  Out(0x3FA, 0x41);  // FIFO on, trigger 4
  Out(0x3F9, 0x01);
  for (int i = 0; i < 3; ++i) uart_.Receive(static_cast<uint8_t>('0' + i));
  EXPECT_EQ(In(0x3FA), 0xC1);  // 3 < 4: no RDI (timeout not modelled)
  uart_.Receive('3');
  EXPECT_EQ(In(0x3FA), 0xC4);
  for (int i = 4; i < 17; ++i) uart_.Receive(static_cast<uint8_t>('0' + i));
  EXPECT_EQ(In(0x3FD), 0x63);  // 17th byte overran
  std::string got;
  while (In(0x3FD) & 0x01) got.push_back(static_cast<char>(In(0x3F8)));
  EXPECT_EQ(got, "0123456789:;<=>?");
  EXPECT_EQ(In(0x3F8), 0x00);  // empty FIFO reads 0
}

TEST_F(UartTest, FcrClearRxDropsPendingBytes) {
  Out(0x3FA, 0x01);
  uart_.Receive('a');
  Out(0x3FA, 0x03);
  EXPECT_EQ(In(0x3FD), 0x60);
}

TEST_F(UartTest, LoopbackReturnsOutputAndMirrorsModemLines) {
  Out(0x3FC, 0x1F);  // loopback, DTR, RTS, OUT1, OUT2
  EXPECT_EQ(In(0x3FC), 0x1F);
  EXPECT_EQ(In(0x3FE), 0xF0);
  Out(0x3FC, 0x11);  // loopback + DTR only -> DSR
  EXPECT_EQ(In(0x3FE), 0x20);
  Out(0x3FC, 0x12);  // RTS -> CTS
  EXPECT_EQ(In(0x3FE), 0x10);
  Out(0x3FC, 0x14);  // OUT1 -> RI
  EXPECT_EQ(In(0x3FE), 0x40);
  Out(0x3F8, 0xAE);
  EXPECT_TRUE(out_.empty());
  EXPECT_EQ(In(0x3FD), 0x61);
  EXPECT_EQ(In(0x3F8), 0xAE);
  uart_.Receive('z');  // host input is disconnected in loopback
  EXPECT_EQ(In(0x3FD), 0x60);
  Out(0x3FC, 0x08);
  EXPECT_EQ(In(0x3FE), 0xB0);
}

TEST_F(UartTest, McrKeepsLow5BitsAndScratchIsReadWrite) {
  Out(0x3FC, 0xFF);
  EXPECT_EQ(In(0x3FC), 0x1F);
  Out(0x3FF, 0xA5);
  EXPECT_EQ(In(0x3FF), 0xA5);
}

TEST_F(UartTest, LsrAndMsrWritesIgnored) {
  Out(0x3FD, 0x00);
  Out(0x3FE, 0x00);
  EXPECT_EQ(In(0x3FD), 0x60);
  EXPECT_EQ(In(0x3FE), 0xB0);
}

TEST_F(UartTest, WordAccessIsTwoByteAccesses) {
  Out(0x3FB, 0x80);
  uint8_t w[2] = {0x01, 0x00};
  VBTS_ASSERT_OK(bus_.Dispatch(0x3F8, 2, true, absl::MakeSpan(w)));
  EXPECT_EQ(uart_.divisor(), 0x0001);
}

}  // namespace
}  // namespace vbts::vmm
