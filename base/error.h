// arc::Error and the check macros: every user-facing failure says what was wrong, the value seen
// and the fix.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace arc {

/// The exception Arclight throws for anything a user can get wrong.
class Error : public std::runtime_error {
 public:
  /// An error whose what() is `message`.
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// Ends a fit that SIGINT (Ctrl-C) stopped at a batch boundary, on every rank alike.
class Interrupted : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

/// The candidate nearest to `word` by edit distance, or "" when none is close enough to suggest.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

/// "unknown <what> 'name'; did you mean 'x'? known: a, b, c".
std::string unknown_name_message(const std::string& what, const std::string& name,
                                 const std::vector<std::string>& known);

/// Throws unknown_name_message(key, value, allowed) unless `value` is one of `allowed`.
void check_choice(const std::string& key, const std::string& value, const std::vector<std::string>& allowed);

/// "a, b, c".
std::string join(const std::vector<std::string>& items, const std::string& separator = ", ");

}  // namespace arc

/// Throws arc::Error with the message built from the remaining arguments when `cond` is false.
#define ARC_CHECK(cond, ...)                                          \
  do {                                                                \
    if (!(cond)) throw ::arc::Error(::arc::detail::str(__VA_ARGS__)); \
  } while (0)

/// Throws arc::Error with the message built from the arguments.
#define ARC_FAIL(...) throw ::arc::Error(::arc::detail::str(__VA_ARGS__))
