// fuzz_input.h: reads a fuzz input as a stream of little-endian fields; past
// the end every field reads as zero, so any input decodes to something.
#ifndef VBTS_FUZZ_FUZZ_INPUT_H_
#define VBTS_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace vbts::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  size_t remaining() const { return empty() ? 0 : size_ - pos_; }
  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() { return static_cast<uint16_t>(U8() | U8() << 8); }
  uint32_t U32() { return U16() | static_cast<uint32_t>(U16()) << 16; }
  uint64_t U64() { return U32() | static_cast<uint64_t>(U32()) << 32; }
  bool Bool() { return U8() & 1; }
  // Up to `max` bytes (fewer at the end of the input), into out; returns how many.
  size_t Bytes(uint8_t* out, size_t max) {
    const size_t n = max < remaining() ? max : remaining();
    if (n != 0) std::memcpy(out, data_ + pos_, n);  // (byte by byte it was most of pci_fuzz's time)
    pos_ += n;
    return n;
  }
  // A value in the shapes guest programming takes: any 64 bits, a small
  // number or address (16 bits), a single bit, a sign-extended negative, or
  // an address near `near` (DS area, buffers, stacks in a small RAM).
  uint64_t Value(uint64_t near = 0) {
    switch (U8() % 5) {
      case 0: return U64();
      case 1: return U16();
      case 2: return uint64_t{1} << (U8() % 64);
      case 3: return ~uint64_t{0} - U16();
      default: return near + U16();
    }
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace vbts::fuzz

#endif  // VBTS_FUZZ_FUZZ_INPUT_H_
