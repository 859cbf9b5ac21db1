// engine: the message of an exception held in a std::exception_ptr, for errors that quote it.
#pragma once

#include <exception>
#include <string>

namespace axle {

/// what() of the exception `error` holds, or a note that it is not a std::exception.
[[nodiscard]] inline std::string exception_text(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace axle
