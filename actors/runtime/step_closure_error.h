// actors: the error a failed step closure raises where its replica next waits (add_step_closure,
// actors/host/api.h); the closure runner (actors/runtime/closure_runner.h) makes it.
#pragma once

#include <stdexcept>

namespace axle {

/// A step closure threw: the message names the line that added it and what it threw.
class StepClosureError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace axle
