// trace_format.cc: the `vbts record` trace file (docs/trace-format.md).
#include "record/trace_format.h"

#include <zlib.h>

#include <cstring>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace vbts::record::trace {
namespace {

using pmu::BranchKind;
using pmu::ExecMode;

constexpr uint8_t kRecordsTag[4] = {'V', 'B', 'R', 'B'};
constexpr uint8_t kEndTag[4] = {'V', 'B', 'R', 'E'};
constexpr size_t kFileHeaderFixed = 16;  // magic, major, minor, header length
constexpr size_t kBlockHeader = 16;      // tag, payload length, record count, CRC-32

// Header fields (tag byte, LEB128 length, bytes).
enum HeaderTag : uint8_t {
  kHImage = 1, kHSha256 = 2, kHCpuModel = 3, kHVbtsVersion = 4, kHStartTime = 5,
  kHCode = 6, kHFilter = 7, kHMaxRecords = 8, kHCommand = 9, kHEntry = 10,
};
// End block fields.
enum TrailerTag : uint8_t {
  kTRecords = 1, kTFiltered = 2, kTUnrecorded = 3, kTLimit = 4, kTEnd = 5, kTExitStatus = 6, kTDuration = 7,
};

// Records: a byte T, then
//   T & 0x80: a run of (T & 0x7F) + 1 records, each the one the prediction
//             table holds for the current position;
//   else:     T & 0x1F kind (pmu::BranchKind, 1..18), T & 0x20 a state byte
//             follows, T & 0x40 IA32_EFER.LMA; then [state byte]
//             zigzag-LEB128(from - position), zigzag-LEB128(to - from),
//             [vector byte for int/exception/interrupt/nmi].
constexpr uint8_t kRunBit = 0x80, kStateBit = 0x20, kIa32eBit = 0x40, kKindMask = 0x1F;
constexpr uint32_t kMaxRun = 128;
constexpr int kTableBits = 12;

uint32_t Crc(uint32_t crc, const uint8_t* p, size_t n) {
  return static_cast<uint32_t>(crc32(crc, p, static_cast<uInt>(n)));
}

void PutLe(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t GetLe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
void PutVarint(std::vector<uint8_t>& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}
uint64_t ZigZag(uint64_t diff) {
  const int64_t s = static_cast<int64_t>(diff);
  return (static_cast<uint64_t>(s) << 1) ^ static_cast<uint64_t>(s >> 63);
}
uint64_t UnZigZag(uint64_t z) { return (z >> 1) ^ (~(z & 1) + 1); }

// A bounds-checked cursor over a byte span.
struct Cursor {
  const uint8_t* p;
  size_t n;
  size_t pos = 0;
  bool Byte(uint8_t* b) {
    if (pos >= n) return false;
    *b = p[pos++];
    return true;
  }
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Byte(&b)) return false;
      if (shift == 63 && (b & 0x7E)) return false;  // more than 64 bits
      *v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  bool Bytes(size_t len, const uint8_t** out) {
    if (len > n - pos) return false;
    *out = p + pos;
    pos += len;
    return true;
  }
  bool done() const { return pos == n; }
};

void PutField(std::vector<uint8_t>& out, uint8_t tag, const void* data, size_t len) {
  out.push_back(tag);
  PutVarint(out, len);
  const auto* b = static_cast<const uint8_t*>(data);
  out.insert(out.end(), b, b + len);
}
void PutString(std::vector<uint8_t>& out, uint8_t tag, const std::string& s) { PutField(out, tag, s.data(), s.size()); }
void PutU64(std::vector<uint8_t>& out, uint8_t tag, uint64_t v) {
  std::vector<uint8_t> b;
  PutLe(b, v, 8);
  PutField(out, tag, b.data(), b.size());
}

// Calls `field(tag, data, len)` for every field; false if the bytes are not
// a sequence of whole fields.
template <typename F>
bool ForEachField(const uint8_t* p, size_t n, F field) {
  Cursor c{p, n};
  while (!c.done()) {
    uint8_t tag;
    uint64_t len;
    const uint8_t* data;
    if (!c.Byte(&tag) || !c.Varint(&len) || !c.Bytes(len, &data)) return false;
    if (!field(tag, data, static_cast<size_t>(len))) return false;
  }
  return true;
}

bool ValidKind(uint8_t k) { return k >= 1 && k <= static_cast<uint8_t>(BranchKind::kNmi); }

}  // namespace

bool HasVector(BranchKind k) {
  return k == BranchKind::kSoftInt || k == BranchKind::kException || k == BranchKind::kInterrupt ||
         k == BranchKind::kNmi;
}

const char* ModeName(ExecMode m) {
  switch (m) {
    case ExecMode::kReal: return "real";
    case ExecMode::kProt16: return "pm16";
    case ExecMode::kProt32: return "pm32";
    case ExecMode::kLong64: return "lm64";
  }
  return "?";
}

Record FromBranch(const pmu::Branch& b) {
  Record r;
  r.kind = b.kind;
  r.from = b.from;
  r.to = b.to;
  r.cpl_from = b.cpl_from;
  r.cpl_to = b.cpl_to;
  r.mode_from = b.mode_from;
  r.mode_to = b.mode_to;
  r.vector = HasVector(b.kind) ? b.vector : 0;
  r.ia32e = b.ia32e;
  return r;
}

// The state encoder and decoder share: the current position (where the last
// record went, with its CPL and mode) and the prediction table, which maps a
// position to the record that last followed it.  Reset at every block, so
// that each block decodes on its own.
struct Predictor {
  struct Slot {
    Record r;
    uint32_t gen = 0;
  };
  std::vector<Slot> table;  // allocated at the first record: a trace that has none never needs it
  uint32_t gen = 1;
  uint64_t pos = 0;
  uint8_t cpl = 0;
  ExecMode mode = ExecMode::kProt32;

  void Reset() {
    gen++;
    pos = 0;
    cpl = 0;
    mode = ExecMode::kProt32;
  }
  Slot& SlotAt() {
    if (table.empty()) table.resize(size_t{1} << kTableBits);
    return table[(pos * 0x9E3779B97F4A7C15ull) >> (64 - kTableBits)];
  }
  const Record* Predict() {
    Slot& s = SlotAt();
    return s.gen == gen ? &s.r : nullptr;
  }
  void Advance(const Record& r) {
    SlotAt() = {r, gen};
    pos = r.to;
    cpl = r.cpl_to;
    mode = r.mode_to;
  }
};

struct Writer::Codec {
  Predictor pred;
  std::vector<uint8_t> payload;
  uint32_t count = 0;
  uint32_t run = 0;

  void EmitRun() {
    if (run == 0) return;
    payload.push_back(static_cast<uint8_t>(kRunBit | (run - 1)));
    run = 0;
  }
  void Encode(const Record& r) {
    const Record* p = pred.Predict();
    if (p && *p == r) {
      if (++run == kMaxRun) EmitRun();
    } else {
      EmitRun();
      uint8_t t = static_cast<uint8_t>(r.kind);
      const bool state = r.cpl_from != pred.cpl || r.mode_from != pred.mode || r.cpl_to != r.cpl_from ||
                         r.mode_to != r.mode_from;
      if (state) t |= kStateBit;
      if (r.ia32e) t |= kIa32eBit;
      payload.push_back(t);
      if (state)
        payload.push_back(static_cast<uint8_t>(r.cpl_from | static_cast<uint8_t>(r.mode_from) << 2 |
                                               r.cpl_to << 4 | static_cast<uint8_t>(r.mode_to) << 6));
      PutVarint(payload, ZigZag(r.from - pred.pos));
      PutVarint(payload, ZigZag(r.to - r.from));
      if (HasVector(r.kind)) payload.push_back(r.vector);
    }
    pred.Advance(r);
    count++;
  }
};

Writer::Writer(Output out) : out_(std::move(out)), codec_(std::make_unique<Codec>()) {}
Writer::~Writer() = default;

uint64_t Writer::pending_records() const { return codec_->count; }

absl::Status Writer::Emit(absl::Span<const uint8_t> bytes) {
  absl::Status s = out_(bytes);
  if (s.ok()) bytes_ += bytes.size();
  return s;
}

absl::Status Writer::WriteHeader(const Header& h) {
  std::vector<uint8_t> fields;
  PutString(fields, kHImage, h.image);
  if (h.image_sha256) PutField(fields, kHSha256, h.image_sha256->data(), 32);
  PutString(fields, kHCpuModel, h.cpu_model);
  PutString(fields, kHVbtsVersion, h.vbts_version);
  PutU64(fields, kHStartTime, h.start_time_ns);
  for (const AddressRange& r : h.code) {
    std::vector<uint8_t> b;
    PutLe(b, r.start, 8);
    PutLe(b, r.end, 8);
    PutField(fields, kHCode, b.data(), b.size());
  }
  if (h.entry) PutU64(fields, kHEntry, *h.entry);
  PutString(fields, kHFilter, h.filter);
  PutU64(fields, kHMaxRecords, h.max_records);
  PutString(fields, kHCommand, h.command);
  if (fields.size() > kMaxHeaderBytes) return absl::InvalidArgumentError("trace header too large");
  std::vector<uint8_t> out(kMagic, kMagic + 8);
  PutLe(out, kVersionMajor, 2);
  PutLe(out, kVersionMinor, 2);
  PutLe(out, fields.size(), 4);
  out.insert(out.end(), fields.begin(), fields.end());
  PutLe(out, Crc(0, out.data(), out.size()), 4);
  return Emit(out);
}

absl::Status Writer::Add(const Record& r) {
  if (finished_) return absl::FailedPreconditionError("trace writer: Add after Finish");
  if (!ValidKind(static_cast<uint8_t>(r.kind)) || r.cpl_from > 3 || r.cpl_to > 3 ||
      static_cast<uint8_t>(r.mode_from) > 3 || static_cast<uint8_t>(r.mode_to) > 3)
    return absl::InvalidArgumentError(absl::StrFormat("trace writer: not a recordable transfer (kind %d)",
                                                      static_cast<int>(r.kind)));
  codec_->Encode(r);
  records_++;
  if (codec_->payload.size() >= kBlockTarget) return Flush();
  return absl::OkStatus();
}

absl::Status Writer::Flush() {
  Codec& c = *codec_;
  c.EmitRun();
  if (c.count == 0) return absl::OkStatus();
  std::vector<uint8_t> block(kRecordsTag, kRecordsTag + 4);
  PutLe(block, c.payload.size(), 4);
  PutLe(block, c.count, 4);
  const uint32_t crc = Crc(Crc(0, block.data(), 12), c.payload.data(), c.payload.size());
  PutLe(block, crc, 4);
  block.insert(block.end(), c.payload.begin(), c.payload.end());
  c.payload.clear();
  c.count = 0;
  c.pred.Reset();
  return Emit(block);
}

absl::Status Writer::Finish(Trailer t) {
  if (finished_) return absl::FailedPreconditionError("trace writer: Finish twice");
  absl::Status s = Flush();
  if (!s.ok()) return s;
  finished_ = true;
  t.records = records_;
  std::vector<uint8_t> fields;
  PutU64(fields, kTRecords, t.records);
  PutU64(fields, kTFiltered, t.filtered);
  PutU64(fields, kTUnrecorded, t.unrecorded);
  const uint8_t limit = t.limit_reached ? 1 : 0;
  PutField(fields, kTLimit, &limit, 1);
  PutString(fields, kTEnd, t.end);
  PutU64(fields, kTExitStatus, static_cast<uint64_t>(t.exit_status));
  PutU64(fields, kTDuration, t.duration_ns);
  std::vector<uint8_t> block(kEndTag, kEndTag + 4);
  PutLe(block, fields.size(), 4);
  PutLe(block, 0, 4);
  const uint32_t crc = Crc(Crc(0, block.data(), 12), fields.data(), fields.size());
  PutLe(block, crc, 4);
  block.insert(block.end(), fields.begin(), fields.end());
  return Emit(block);
}

// ---------------------------------------------------------------------------

struct Reader::Codec {
  Predictor pred;
  // Decodes one block's payload of `count` records; the error names the
  // payload offset.
  absl::Status Decode(const uint8_t* p, size_t n, uint32_t count, std::vector<Record>& out) {
    pred.Reset();
    out.clear();
    Cursor c{p, n};
    while (!c.done()) {
      const size_t at = c.pos;
      uint8_t t = 0;
      c.Byte(&t);
      if (t & kRunBit) {
        const uint32_t run = (t & 0x7F) + 1u;
        for (uint32_t i = 0; i < run; i++) {
          const Record* r = pred.Predict();
          if (!r) return absl::DataLossError(absl::StrFormat("payload byte %u: a predicted record with no prediction", at));
          if (out.size() >= count) return TooMany(count);
          const Record copy = *r;
          out.push_back(copy);
          pred.Advance(copy);
        }
        continue;
      }
      Record r;
      const uint8_t kind = t & kKindMask;
      if (!ValidKind(kind)) return absl::DataLossError(absl::StrFormat("payload byte %u: unknown kind %u", at, kind));
      r.kind = static_cast<BranchKind>(kind);
      r.ia32e = (t & kIa32eBit) != 0;
      r.cpl_from = r.cpl_to = pred.cpl;
      r.mode_from = r.mode_to = pred.mode;
      if (t & kStateBit) {
        uint8_t s;
        if (!c.Byte(&s)) return absl::DataLossError(absl::StrFormat("payload byte %u: record cut short", at));
        r.cpl_from = s & 3;
        r.mode_from = static_cast<ExecMode>((s >> 2) & 3);
        r.cpl_to = (s >> 4) & 3;
        r.mode_to = static_cast<ExecMode>((s >> 6) & 3);
      }
      uint64_t dfrom, dto;
      if (!c.Varint(&dfrom) || !c.Varint(&dto))
        return absl::DataLossError(absl::StrFormat("payload byte %u: record cut short", at));
      r.from = pred.pos + UnZigZag(dfrom);
      r.to = r.from + UnZigZag(dto);
      if (HasVector(r.kind) && !c.Byte(&r.vector))
        return absl::DataLossError(absl::StrFormat("payload byte %u: record cut short", at));
      if (out.size() >= count) return TooMany(count);
      out.push_back(r);
      pred.Advance(r);
    }
    if (out.size() != count)
      return absl::DataLossError(
          absl::StrFormat("the block header says %u records, its payload holds %u", count, out.size()));
    return absl::OkStatus();
  }
  static absl::Status TooMany(uint32_t count) {
    return absl::DataLossError(absl::StrFormat("the block header says %u records, its payload holds more", count));
  }
};

Reader::Reader(std::istream& in) : in_(in), codec_(std::make_unique<Codec>()) {}
Reader::~Reader() = default;

namespace {
// Reads up to n bytes; returns how many were read.
size_t ReadUpTo(std::istream& in, uint8_t* p, size_t n) {
  in.read(reinterpret_cast<char*>(p), static_cast<std::streamsize>(n));
  return static_cast<size_t>(in.gcount());
}
}  // namespace

absl::StatusOr<std::unique_ptr<Reader>> Reader::Open(std::istream& in) {
  std::unique_ptr<Reader> r(new Reader(in));
  uint8_t fixed[kFileHeaderFixed];
  const size_t got = ReadUpTo(in, fixed, sizeof fixed);
  if (got < 8 || std::memcmp(fixed, kMagic, 8) != 0)
    return absl::InvalidArgumentError("not a vbts trace file (no VBTSTRC magic at the start)");
  if (got < sizeof fixed) return absl::DataLossError("truncated: the file ends inside the trace header");
  Header& h = r->header_;
  h.version_major = static_cast<uint16_t>(GetLe(fixed + 8, 2));
  h.version_minor = static_cast<uint16_t>(GetLe(fixed + 10, 2));
  if (h.version_major != kVersionMajor)
    return absl::FailedPreconditionError(absl::StrFormat(
        "trace format version %u.%u; this vbts reads version %u.x", h.version_major, h.version_minor, kVersionMajor));
  const uint32_t len = static_cast<uint32_t>(GetLe(fixed + 12, 4));
  if (len > kMaxHeaderBytes)
    return absl::DataLossError(absl::StrFormat("corrupt: header length %u is over the %u-byte limit", len,
                                               kMaxHeaderBytes));
  std::vector<uint8_t> fields(len + 4);
  if (ReadUpTo(in, fields.data(), fields.size()) != fields.size())
    return absl::DataLossError("truncated: the file ends inside the trace header");
  const uint32_t crc = Crc(Crc(0, fixed, sizeof fixed), fields.data(), len);
  if (crc != GetLe(fields.data() + len, 4)) return absl::DataLossError("corrupt: the trace header fails its CRC check");
  bool ok = ForEachField(fields.data(), len, [&h](uint8_t tag, const uint8_t* d, size_t n) {
    std::string s(reinterpret_cast<const char*>(d), n);
    switch (tag) {
      case kHImage: h.image = s; break;
      case kHSha256:
        if (n != 32) return false;
        h.image_sha256.emplace();
        std::memcpy(h.image_sha256->data(), d, 32);
        break;
      case kHCpuModel: h.cpu_model = s; break;
      case kHVbtsVersion: h.vbts_version = s; break;
      case kHStartTime:
        if (n != 8) return false;
        h.start_time_ns = GetLe(d, 8);
        break;
      case kHCode:
        if (n != 16) return false;
        h.code.push_back({GetLe(d, 8), GetLe(d + 8, 8)});
        break;
      case kHFilter: h.filter = s; break;
      case kHMaxRecords:
        if (n != 8) return false;
        h.max_records = GetLe(d, 8);
        break;
      case kHCommand: h.command = s; break;
      case kHEntry:
        if (n != 8) return false;
        h.entry = GetLe(d, 8);
        break;
      default: break;  // a field of a newer minor version
    }
    return true;
  });
  if (!ok) return absl::DataLossError("corrupt: malformed trace header fields");
  r->offset_ = kFileHeaderFixed + fields.size();
  return r;
}

void Reader::Fail(absl::Status s) {
  status_ = absl::Status(s.code(), absl::StrFormat("%s (%u records in %u blocks read before it)", s.message(),
                                                   records_read_, blocks_read_));
  done_ = true;
  // Nothing of a block that failed (its records may be half decoded) is
  // ever returned, however often Next() is called afterwards.
  block_.clear();
  pos_ = 0;
}

bool Reader::LoadBlock() {
  const uint64_t at = offset_;
  uint8_t hdr[kBlockHeader];
  const size_t got = ReadUpTo(in_, hdr, sizeof hdr);
  if (got == 0) {
    Fail(absl::DataLossError(absl::StrFormat(
        "truncated at byte %u: the recording has no end block (vbts stopped before finishing it)", at)));
    return false;
  }
  if (got < sizeof hdr) {
    Fail(absl::DataLossError(absl::StrFormat("truncated at byte %u: the file ends inside a block header", at)));
    return false;
  }
  const bool records = std::memcmp(hdr, kRecordsTag, 4) == 0;
  const bool end = std::memcmp(hdr, kEndTag, 4) == 0;
  if (!records && !end) {
    Fail(absl::DataLossError(absl::StrFormat("corrupt at byte %u: no block starts there", at)));
    return false;
  }
  const uint32_t len = static_cast<uint32_t>(GetLe(hdr + 4, 4));
  const uint32_t count = static_cast<uint32_t>(GetLe(hdr + 8, 4));
  if (len > kMaxBlockPayload) {
    Fail(absl::DataLossError(absl::StrFormat("corrupt at byte %u: block length %u is over the limit", at, len)));
    return false;
  }
  std::vector<uint8_t> payload(len);
  const size_t pgot = ReadUpTo(in_, payload.data(), len);
  if (pgot < len) {
    Fail(absl::DataLossError(absl::StrFormat(
        "truncated at byte %u: the file ends inside a block (%u of its %u bytes present)", at, pgot, len)));
    return false;
  }
  offset_ += kBlockHeader + len;
  if (Crc(Crc(0, hdr, 12), payload.data(), len) != GetLe(hdr + 12, 4)) {
    Fail(absl::DataLossError(absl::StrFormat("corrupt at byte %u: the block fails its CRC check", at)));
    return false;
  }
  if (end) {
    Trailer t;
    bool ok = count == 0 && ForEachField(payload.data(), len, [&t](uint8_t tag, const uint8_t* d, size_t n) {
      switch (tag) {
        case kTRecords: if (n != 8) return false; t.records = GetLe(d, 8); break;
        case kTFiltered: if (n != 8) return false; t.filtered = GetLe(d, 8); break;
        case kTUnrecorded: if (n != 8) return false; t.unrecorded = GetLe(d, 8); break;
        case kTLimit: if (n != 1) return false; t.limit_reached = d[0] != 0; break;
        case kTEnd: t.end.assign(reinterpret_cast<const char*>(d), n); break;
        case kTExitStatus: if (n != 8) return false; t.exit_status = static_cast<int64_t>(GetLe(d, 8)); break;
        case kTDuration: if (n != 8) return false; t.duration_ns = GetLe(d, 8); break;
        default: break;
      }
      return true;
    });
    if (!ok) {
      Fail(absl::DataLossError(absl::StrFormat("corrupt at byte %u: malformed end block", at)));
      return false;
    }
    if (t.records != records_read_) {
      Fail(absl::DataLossError(absl::StrFormat("corrupt at byte %u: the end block counts %u records, the blocks held %u",
                                               at, t.records, records_read_)));
      return false;
    }
    uint8_t extra;
    if (ReadUpTo(in_, &extra, 1) != 0) {
      Fail(absl::DataLossError(absl::StrFormat("corrupt at byte %u: bytes after the end block", offset_)));
      return false;
    }
    trailer_ = t;
    done_ = true;
    status_ = absl::OkStatus();
    return false;
  }
  absl::Status s = codec_->Decode(payload.data(), len, count, block_);
  if (!s.ok()) {
    Fail(absl::DataLossError(absl::StrFormat("corrupt block at byte %u: %s", at, s.message())));
    return false;
  }
  blocks_read_++;
  pos_ = 0;
  return true;
}

bool Reader::Next(Record* r) {
  while (pos_ >= block_.size()) {
    if (done_ || !LoadBlock()) return false;
  }
  *r = block_[pos_++];
  records_read_++;
  return true;
}

absl::StatusOr<ParsedTrace> ParseTrace(const std::string& bytes) {
  std::istringstream in(bytes);
  absl::StatusOr<std::unique_ptr<Reader>> r = Reader::Open(in);
  if (!r.ok()) return r.status();
  ParsedTrace t;
  t.header = (*r)->header();
  Record rec;
  while ((*r)->Next(&rec)) t.records.push_back(rec);
  t.trailer = (*r)->trailer();
  t.status = (*r)->status();
  return t;
}

}  // namespace vbts::record::trace
