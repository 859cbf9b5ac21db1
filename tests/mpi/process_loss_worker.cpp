// A job for process_loss_test: every replica all-reduces in a loop of steps; at step 3 the last
// replica of the job kills its process (argument "kill") or throws ("throw"). Each process prints
// what ended its replicas to stderr and exits 1, or exits 0 when all its steps completed.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "axle/axle.h"

// Under use_spmd() ("spmd-throw"): every process steps a value laid out over a mesh of the job's
// devices, its sum a collective across the processes; at step 3 the last process throws.
int spmd_steps() {
  using axle::spmd::mark_sharding;
  axle::use_spmd();
  std::vector<int64_t> ids(static_cast<std::size_t>(axle::global_device_count()));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  const axle::Mesh mesh(ids, {static_cast<int64_t>(ids.size())}, {"x"});
  try {
    axle::Tensor x = axle::ones({static_cast<int64_t>(ids.size()) * 2});
    mark_sharding(x, mesh, {"x"});
    for (int step = 0; step < 50; ++step) {
      if (step == 3 && axle::process_index() == axle::process_count() - 1) {
        throw std::runtime_error("process gave up at step 3");
      }
      const axle::Tensor total = axle::sum(x);
      axle::mark_step();
      if (total.item() != static_cast<double>(ids.size() * 2))
        throw std::logic_error("a wrong sum");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "process %d failed: %s\n", axle::process_index(), e.what());
    return 1;
  }
  return 0;
}

// Under FullyShardedDataParallel ("fsdp-throw"): every replica trains a small MLP whose layers
// size_based_auto_wrap_policy makes units of their own; at step 3 the last replica of the job
// throws after its backward pass, while the others wait for their step's gathers and
// reduce-scatters.
int fsdp_steps() {
  try {
    axle::spawn([&](int ordinal) {
      const axle::Device device = axle::xla_device();
      axle::set_rng_state(5, device);
      auto layer = [&](int64_t in, int64_t out) {
        return std::make_shared<axle::nn::Linear>(in, out, true, device);
      };
      auto model =
          std::make_shared<axle::nn::Sequential>(std::vector<std::shared_ptr<axle::nn::Module>>{
              layer(4, 32), layer(32, 32), layer(32, 4)});
      axle::FullyShardedDataParallel fsdp(
          model, {.auto_wrap_policy = axle::size_based_auto_wrap_policy(1000)});
      axle::optim::SGD optimizer(fsdp.parameters(), {.lr = 0.01});
      for (int step = 0; step < 50; ++step) {
        optimizer.zero_grad();
        const axle::Tensor loss = axle::sum(fsdp(axle::ones({2, 4})));
        loss.backward();
        if (step == 3 && ordinal == axle::world_size() - 1) {
          throw std::runtime_error("replica gave up at step 3");
        }
        optimizer.step();
        axle::mark_step();
        (void)loss.item();
      }
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "process %d failed: %s\n", axle::process_index(), e.what());
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  const std::string how = argc > 1 ? argv[1] : "kill";
  if (how == "spmd-throw") return spmd_steps();
  if (how == "fsdp-throw") return fsdp_steps();
  try {
    axle::spawn([&](int ordinal) {
      for (int step = 0; step < 50; ++step) {
        if (step == 3 && ordinal == axle::world_size() - 1) {
          if (how == "kill") {
            // Long enough for the others to be waiting at this step's all-reduce.
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
            std::raise(SIGKILL);
          }
          throw std::runtime_error("replica gave up at step 3");
        }
        const axle::Tensor sum = axle::all_reduce(axle::ReduceType::kSum, axle::ones({4}));
        if (sum.to_vector<float>().at(0) != static_cast<float>(axle::world_size())) {
          throw std::logic_error("a wrong sum");
        }
      }
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "process %d failed: %s\n", axle::process_index(), e.what());
    return 1;
  }
  return 0;
}
