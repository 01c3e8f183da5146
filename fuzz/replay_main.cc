// replay_main.cc: the main() of the fuzz targets in a build without libFuzzer
// (VBTS_FUZZ off, any compiler): runs LLVMFuzzerTestOneInput once on every
// file named on the command line and every regular file in the directories
// named there (not recursive), in sorted path order, and prints how many it
// ran.  ctest's fuzz.* tests replay the seed corpora in fuzz/corpus/ with it,
// so the normal and ASan+UBSan builds check every seed (docs/security.md).
// Exit status: 0 after all inputs ran (a finding aborts the process), 2 if an
// argument cannot be read or names no input at all.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; i++) {
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
    std::fprintf(stderr, "usage: %s FILE|DIR...  (runs the fuzz target on each input; none given)\n", argv[0]);
    return 2;
  }
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "%s: cannot read %s\n", argv[0], f.c_str());
      return 2;
    }
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // A copy of exactly the input's size, as libFuzzer passes it: ASan sees
    // a read past the end.
    std::vector<uint8_t> data(bytes.begin(), bytes.end());
    uint8_t* p = data.empty() ? nullptr : data.data();
    LLVMFuzzerTestOneInput(p, data.size());
  }
  std::printf("%s: ran %zu inputs\n", argv[0], files.size());
  return 0;
}
