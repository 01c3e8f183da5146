// file_test.cc: ReadWholeFile's empty-file rule (kernel images refuse it, Multiboot modules allow it).
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

}  // namespace
}  // namespace vbts
