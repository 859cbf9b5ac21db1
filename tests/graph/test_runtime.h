// Test support: the runtime graph-level tests run on. The tests under tests/graph/{ops,autograd,
// nn,optim} check graph code and include graph headers only; each is built twice from the same
// objects — on the reference runtime (graph/reference: axle::graph alone, plain loops) as
// graph_<folder>_<name>, and on this process's devices (axle::actors: the compiler, fusion and
// the CPU backend) as graph_<folder>_<name>_on_devices — by the test program linking one of
// test_runtime_reference.cpp and test_runtime_devices.cpp.
#pragma once

namespace axle::testing {

/// Starts the next test on a fresh runtime of `devices` devices: nothing compiled, cached or
/// pending from earlier tests, metrics cleared.
void fresh_runtime(int devices = 1);
/// Executes every pending tensor of this thread as one step (mark_step on devices).
void sync_step();
/// Waits until everything issued so far has finished (wait_device_ops on devices).
void wait_all();
/// "reference" or "devices": which runtime this program runs on.
[[nodiscard]] const char* runtime_name();

}  // namespace axle::testing
