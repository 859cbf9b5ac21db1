// tests/fuzz: TensorBoard event files (graph/formats/event_file.h) through parse_event_records, in
// memory. A damaged file must throw FileError and nothing else; what parses must be whole.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "axle/graph/formats/error.h"
#include "axle/graph/formats/event_file.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  try {
    const axle::EventFile file = axle::parse_event_records(
        std::as_bytes(std::span<const uint8_t>(data, size)), "fuzz.tfevents");
    for (const axle::EventValue& value : file.values) {
      if (value.histogram) {
        axle::fuzz::check(value.bucket_limit.size() <= size && value.bucket.size() <= size,
                          "a histogram's buckets come from the input");
      }
    }
  } catch (const axle::FileError&) {
  }
  return 0;
}
