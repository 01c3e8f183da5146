// status_macros.h: the small error-handling vocabulary every vbts layer uses.
// Abseil LTS 20220623 (Debian 12) has Status/StatusOr but no status macros and
// no absl/log, so these are ours (modelled on sandboxed_api/util/status_macros.h).
#ifndef VBTS_BASE_STATUS_MACROS_H_
#define VBTS_BASE_STATUS_MACROS_H_

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define VBTS_CONCAT_INNER_(a, b) a##b
#define VBTS_CONCAT_(a, b) VBTS_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` (an absl::Status) is not OK.
#define VBTS_RETURN_IF_ERROR(expr)                 \
  do {                                             \
    ::absl::Status vbts_status_ = (expr);          \
    if (!vbts_status_.ok()) return vbts_status_;   \
  } while (0)

// `lhs = value of rexpr` (an absl::StatusOr<T>), or returns its error.
#define VBTS_ASSIGN_OR_RETURN(lhs, rexpr) \
  VBTS_ASSIGN_OR_RETURN_IMPL_(VBTS_CONCAT_(vbts_statusor_, __LINE__), lhs, rexpr)
#define VBTS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()

// Aborts with file and line. Only for internal invariants that no guest, image
// or user input can break (see docs/architecture.md, "Errors").
#define VBTS_CHECK(cond)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "vbts: internal error: %s:%d: CHECK(%s) failed\n", \
                   __FILE__, __LINE__, #cond);                                \
      std::abort();                                                           \
    }                                                                         \
  } while (0)

#endif  // VBTS_BASE_STATUS_MACROS_H_
