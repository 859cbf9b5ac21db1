// Built by install_test.cmake with nothing but `$(pkg-config --cflags --libs axle)` and -std=c++20:
// the pkg-config file must give an installed axle's headers and everything its static libraries
// link. Exits 0 when sum(x * x) over arange(0, n) matches a plain loop's.
#include <axle/axle.h>

#include <cmath>
#include <cstdio>

int main() {
  constexpr int kN = 1000;
  axle::Tensor x = axle::arange(0, kN, 1, axle::DType::kFloat32, axle::device(0));
  const double got = axle::sum(x * x).item();
  double want = 0;
  for (int i = 0; i < kN; ++i) want += static_cast<double>(i) * i;
  std::printf("pkg-config program: sum(x * x) = %.1f, loop %.1f\n", got, want);
  return std::abs(got - want) <= 1e-6 * want ? 0 : 1;
}
