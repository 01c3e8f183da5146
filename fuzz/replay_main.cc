// replay_main.cc: the main() of the fuzz targets in a build without libFuzzer
// (VBTS_FUZZ off, any compiler).
//
//   TARGET [--mutate=N] [--seed=S] [--dump=K] FILE|DIR...
//
// Runs LLVMFuzzerTestOneInput once on every file named on the command line
// and every regular file in the directories named there (not recursive), in
// sorted path order, and prints how many it ran.  ctest's fuzz.* tests replay
// the seed corpora in fuzz/corpus/ with it, so the normal and ASan+UBSan
// builds check every seed (docs/security.md).
//
// With --mutate=N it then runs N inputs made from those files by random
// mutations (bit flips, random and boundary bytes and words, insertions,
// erasures, duplicated chunks, splices of two inputs; 1-4 each, at most 4096
// bytes), from a PRNG seeded with S (default 1), so a run is reproducible:
// this is the smoke run CI does of every target under the sanitizers
// (ctest's fuzz.smoke.*), a blind cousin of libFuzzer's coverage-guided runs
// (scripts/fuzz.sh).  --dump=K writes the K-th mutated input (0-based) to
// stdout instead of running anything, to reproduce a finding.
// Exit status: 0 after all inputs ran (a finding aborts the process), 2 if an
// argument cannot be read or names no input at all.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// The sanitizers' hook for "about to die" (only in sanitizer builds).
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace {

// Which mutated input is running, for the message a finding ends with.
char g_which[96];
size_t g_which_len = 0;

void SayWhich() {
  if (g_which_len) (void)!write(2, g_which, g_which_len);
}
void OnFatalSignal(int sig) {
  SayWhich();
  signal(sig, SIG_DFL);
  raise(sig);
}

constexpr size_t kMaxLen = 4096;

void Run(const std::vector<uint8_t>& bytes) {
  // A copy of exactly the input's size, as libFuzzer passes it: ASan sees a
  // read past the end.
  std::vector<uint8_t> data(bytes);
  LLVMFuzzerTestOneInput(data.empty() ? nullptr : data.data(), data.size());
}

// One mutated input from `inputs` (not empty).
std::vector<uint8_t> Mutate(const std::vector<std::vector<uint8_t>>& inputs, std::mt19937_64& rng) {
  auto below = [&](uint64_t n) { return n == 0 ? 0 : static_cast<size_t>(rng() % n); };
  std::vector<uint8_t> d = inputs[below(inputs.size())];
  static constexpr uint64_t kInteresting[] = {0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF,
                                              0x80000000, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFFull, 0x1000, 0xFFF};
  const int n = 1 + static_cast<int>(below(4));
  for (int m = 0; m < n; m++) {
    switch (below(8)) {
      case 0:  // flip a bit
        if (!d.empty()) d[below(d.size())] ^= static_cast<uint8_t>(1u << below(8));
        break;
      case 1:  // a random byte
        if (!d.empty()) d[below(d.size())] = static_cast<uint8_t>(rng());
        break;
      case 2:  // a boundary value, 1, 2, 4 or 8 bytes little-endian
        if (!d.empty()) {
          const uint64_t v = kInteresting[below(std::size(kInteresting))];
          const size_t width = size_t{1} << below(4);
          const size_t at = below(d.size());
          for (size_t i = 0; i < width && at + i < d.size(); i++) d[at + i] = static_cast<uint8_t>(v >> (8 * i));
        }
        break;
      case 3: {  // insert random bytes
        const size_t k = 1 + below(8);
        const size_t at = below(d.size() + 1);
        std::vector<uint8_t> ins(k);
        for (uint8_t& b : ins) b = static_cast<uint8_t>(rng());
        d.insert(d.begin() + static_cast<std::ptrdiff_t>(at), ins.begin(), ins.end());
        break;
      }
      case 4:  // erase a range
        if (!d.empty()) {
          const size_t at = below(d.size());
          const size_t k = 1 + below(std::min<size_t>(d.size() - at, 16));
          d.erase(d.begin() + static_cast<std::ptrdiff_t>(at), d.begin() + static_cast<std::ptrdiff_t>(at + k));
        }
        break;
      case 5:  // duplicate a chunk somewhere else
        if (!d.empty()) {
          const size_t from = below(d.size());
          const size_t k = 1 + below(std::min<size_t>(d.size() - from, 32));
          const std::vector<uint8_t> chunk(d.begin() + static_cast<std::ptrdiff_t>(from),
                                           d.begin() + static_cast<std::ptrdiff_t>(from + k));
          const size_t at = below(d.size() + 1);
          d.insert(d.begin() + static_cast<std::ptrdiff_t>(at), chunk.begin(), chunk.end());
        }
        break;
      case 6: {  // splice: this input's head, another's tail
        const std::vector<uint8_t>& o = inputs[below(inputs.size())];
        const size_t cut = below(d.size() + 1);
        const size_t from = below(o.size() + 1);
        d.resize(cut);
        d.insert(d.end(), o.begin() + static_cast<std::ptrdiff_t>(from), o.end());
        break;
      }
      default:  // truncate
        d.resize(below(d.size() + 1));
        break;
    }
  }
  if (d.size() > kMaxLen) d.resize(kMaxLen);
  return d;
}

bool ParseCount(const char* arg, const char* name, uint64_t& out) {
  const size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0) return false;
  char* end = nullptr;
  out = std::strtoull(arg + n, &end, 10);
  return end != arg + n && *end == '\0';
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  uint64_t mutate = 0, seed = 1;
  std::optional<uint64_t> dump;
  for (int i = 1; i < argc; i++) {
    uint64_t v = 0;
    if (ParseCount(argv[i], "--mutate=", v)) {
      mutate = v;
      continue;
    }
    if (ParseCount(argv[i], "--seed=", v)) {
      seed = v;
      continue;
    }
    if (ParseCount(argv[i], "--dump=", v)) {
      dump = v;
      continue;
    }
    const fs::path arg(argv[i]);
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      for (const fs::directory_entry& e : fs::directory_iterator(arg, ec))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (fs::is_regular_file(arg, ec)) {
      files.push_back(arg);
    } else {
      std::fprintf(stderr, "%s: %s: no such file or directory\n", argv[0], argv[i]);
      return 2;
    }
    if (ec) {
      std::fprintf(stderr, "%s: %s: %s\n", argv[0], argv[i], ec.message().c_str());
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr,
                 "usage: %s [--mutate=N] [--seed=S] [--dump=K] FILE|DIR...  (runs the fuzz target on each input; "
                 "none given)\n",
                 argv[0]);
    return 2;
  }
  std::vector<std::vector<uint8_t>> inputs;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "%s: cannot read %s\n", argv[0], f.c_str());
      return 2;
    }
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    inputs.emplace_back(bytes.begin(), bytes.end());
  }
  std::mt19937_64 rng(seed);
  if (dump) {
    std::vector<uint8_t> d;
    for (uint64_t k = 0; k <= *dump; k++) d = Mutate(inputs, rng);
    std::fwrite(d.data(), 1, d.size(), stdout);
    return 0;
  }
  for (const std::vector<uint8_t>& in : inputs) Run(in);
  std::printf("%s: ran %zu inputs\n", argv[0], inputs.size());
  if (mutate == 0) return 0;
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(SayWhich);
  for (int sig : {SIGABRT, SIGSEGV, SIGILL, SIGFPE, SIGBUS}) signal(sig, OnFatalSignal);
  for (uint64_t k = 0; k < mutate; k++) {
    const std::vector<uint8_t> d = Mutate(inputs, rng);
    const int len = std::snprintf(g_which, sizeof g_which, "fuzz smoke: finding in mutated input %llu (seed %llu): --dump=%llu writes it\n",
                                  static_cast<unsigned long long>(k), static_cast<unsigned long long>(seed),
                                  static_cast<unsigned long long>(k));
    g_which_len = len > 0 ? std::min<size_t>(static_cast<size_t>(len), sizeof g_which - 1) : 0;
    Run(d);
  }
  g_which_len = 0;
  std::printf("%s: ran %llu mutated inputs (seed %llu)\n", argv[0], static_cast<unsigned long long>(mutate),
              static_cast<unsigned long long>(seed));
  return 0;
}
