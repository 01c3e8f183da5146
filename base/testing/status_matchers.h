// status_matchers.h: gMock matchers for absl::Status / StatusOr (Abseil 20220623
// ships none). Usage: EXPECT_THAT(f(), IsOk());
//                     EXPECT_THAT(f(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("p_vaddr")));
#ifndef VBTS_BASE_TESTING_STATUS_MATCHERS_H_
#define VBTS_BASE_TESTING_STATUS_MATCHERS_H_

#include <gmock/gmock.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vbts::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) { return s.status(); }

MATCHER(IsOk, "is OK") {
  const absl::Status& s = GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s.ToString();
  return s.ok();
}

MATCHER_P2(StatusIs, code, message_matcher, "") {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s.ToString();
  return s.code() == code &&
         ::testing::Matches(message_matcher)(std::string(s.message()));
}

#define VBTS_ASSERT_OK(expr) ASSERT_THAT((expr), ::vbts::testing::IsOk())
#define VBTS_EXPECT_OK(expr) EXPECT_THAT((expr), ::vbts::testing::IsOk())
#define VBTS_ASSERT_OK_AND_ASSIGN(lhs, rexpr)         \
  auto VBTS_CONCAT_(vbts_sor_, __LINE__) = (rexpr);   \
  ASSERT_THAT(VBTS_CONCAT_(vbts_sor_, __LINE__), ::vbts::testing::IsOk()); \
  lhs = std::move(VBTS_CONCAT_(vbts_sor_, __LINE__)).value()

}  // namespace vbts::testing

#endif  // VBTS_BASE_TESTING_STATUS_MATCHERS_H_
