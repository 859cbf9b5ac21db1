// Test helpers shared across folders: the text of an expected exception.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace axle::testing {

/// The message of the exception of type E that `f` throws (a test failure if it throws none).
template <class E, class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

/// Whether `text` contains `part`.
inline bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

}  // namespace axle::testing
