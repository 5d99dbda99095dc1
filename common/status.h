// Errors: absl::Status for what a user can cause (it travels up to main, which prints it
// and exits 2); ZT_CHECK for internal invariants (abort with file:line).
#pragma once

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

// Internal invariant: prints the condition with file:line and aborts. Never for user input.
#define ZT_CHECK(cond)                                                                        \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "zerotrain internal error at %s:%d: check failed: %s\n", __FILE__, \
                   __LINE__, #cond);                                                          \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

#define ZT_CONCAT_INNER(a, b) a##b
#define ZT_CONCAT(a, b) ZT_CONCAT_INNER(a, b)

// Returns early from the enclosing function when `expr` (an absl::Status) is not ok.
#define ZT_RETURN_IF_ERROR(expr)             \
  do {                                       \
    absl::Status zt_status_ = (expr);        \
    if (!zt_status_.ok()) return zt_status_; \
  } while (0)

// `lhs = value of expr` (an absl::StatusOr<T>), or return its error.
#define ZT_ASSIGN_OR_RETURN(lhs, expr) \
  ZT_ASSIGN_OR_RETURN_IMPL(ZT_CONCAT(zt_statusor_, __LINE__), lhs, expr)
#define ZT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

namespace zt {

// Exit code for every error a user can cause (bad flags, files, configs, data).
inline constexpr int kUserErrorExitCode = 2;

// `s` with "where: " before its message (the file or key it is about); ok stays ok.
inline absl::Status prefixed(const absl::Status& s, absl::string_view where) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
}

}  // namespace zt
