// backends/cpu: the Philox 4x32-10 block function behind the random kernels (random.cpp), in a
// header of its own so the tests can check it against Random123's known answers.
#pragma once

#include <array>
#include <cstdint>

namespace axle::cpu {

/// One Philox 4x32-10 block: the ten-round bijection of `counter` under `key`.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter,
                                      std::array<uint32_t, 2> key) noexcept;

}  // namespace axle::cpu
