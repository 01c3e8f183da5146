// file_test.cc: ReadWholeFile's empty-file rule (kernel images refuse it, Multiboot modules allow it);
// WriteWholeFile's writes and failures.
#include "base/file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/testing/status_matchers.h"

namespace vbts {
namespace {

using ::testing::HasSubstr;
using ::vbts::testing::StatusIs;

TEST(ReadWholeFileTest, EmptyFileRefusedUnlessAllowed) {
  char path[] = "/tmp/vbts-file-test-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  EXPECT_THAT(ReadWholeFile(path, "kernel image", 1024),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kernel image is empty (0 bytes)")));
  absl::StatusOr<std::vector<uint8_t>> empty = ReadWholeFile(path, "--initrd module", 1024, /*allow_empty=*/true);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
  unlink(path);
}

TEST(WriteWholeFileTest, WritesReplacesAndNamesTheFailure) {
  char path[] = "/tmp/vbts-file-test-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_TRUE(WriteWholeFile(path, std::vector<uint8_t>(5000, 7)).ok());
  ASSERT_TRUE(WriteWholeFile(path, {1, 2, 3}).ok());  // truncated first
  absl::StatusOr<std::vector<uint8_t>> back = ReadWholeFile(path, "test file", 1 << 20);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, (std::vector<uint8_t>{1, 2, 3}));
  unlink(path);
  EXPECT_THAT(WriteWholeFile("/nonexistent-dir/x.elf", {1}),
              StatusIs(absl::StatusCode::kNotFound, "/nonexistent-dir/x.elf: cannot create: No such file or directory"));
  // A full disk (/dev/full answers every write with ENOSPC).
  EXPECT_THAT(WriteWholeFile("/dev/full", {1, 2}),
              StatusIs(absl::StatusCode::kUnknown,
                       "/dev/full: write failed after 0 of 2 bytes: No space left on device"));
}

}  // namespace
}  // namespace vbts
