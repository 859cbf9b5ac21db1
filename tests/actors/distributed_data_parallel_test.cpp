// DistributedDataParallel (actors/parallel/distributed_data_parallel.h) among spawn's replicas: the
// master's parameters and buffers at construction, torch's state_dict names, buckets in reverse
// parameter order within the cap and one all_reduce each, gradients averaged exactly once,
// unused parameters (an error naming them, or zeros with find_unused_parameters), a failing
// replica failing them all, and a GPT trained with DDP on several replicas giving the losses of
// one device on the same global batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "axle/graph/dump.h"
#include "samples/gpt_model.h"
#include "tests/gpt_steps.h"

namespace axle {
namespace {

class Ddp : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    LazySystem::restart(LazySystemOptions{.cpu_devices = GetParam()});
    config::set("AXLE_COLLECTIVE_TIMEOUT", "60");  // a failing test fails instead of hanging
  }
  void TearDown() override { config::unset("AXLE_COLLECTIVE_TIMEOUT"); }
  [[nodiscard]] int n() const { return GetParam(); }

  template <class T>
  std::vector<T> on_replicas(const std::function<T(int)>& fn) {
    std::vector<T> results(static_cast<std::size_t>(n()));
    spawn([&](int r) { results[static_cast<std::size_t>(r)] = fn(r); });
    return results;
  }
};

class MultiDdp : public Ddp {};

auto device_count_name = [](const auto& info) { return std::to_string(info.param) + "devices"; };
INSTANTIATE_TEST_SUITE_P(Devices, Ddp, ::testing::Values(1, 2, 4), device_count_name);
INSTANTIATE_TEST_SUITE_P(Devices, MultiDdp, ::testing::Values(2, 4), device_count_name);

// Three Linears and a buffer; `use_last` = false leaves fc3 out of the loss.
class ThreeLayers : public nn::Module {
 public:
  explicit ThreeLayers(bool use_last = true) : use_last_(use_last) {
    fc1_ = register_module("fc1", std::make_shared<nn::Linear>(4, 8));
    fc2_ = register_module("fc2", std::make_shared<nn::Linear>(8, 4));
    fc3_ = register_module("fc3", std::make_shared<nn::Linear>(4, 2));
    register_buffer("steps", randn({3}));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = fc2_->forward(relu(fc1_->forward(x)));
    return use_last_ ? fc3_->forward(h) : h;
  }

 private:
  bool use_last_;
  std::shared_ptr<nn::Linear> fc1_, fc2_, fc3_;
};

// Replica r's input rows: small values, different on every replica.
Tensor input_of(int replica, int64_t rows = 3) {
  std::vector<float> v(static_cast<std::size_t>(rows * 4));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = 0.25f * static_cast<float>((replica * 5 + static_cast<int>(i) * 3) % 7 - 3);
  }
  return tensor(v, {rows, 4});
}

std::vector<float> flat_state(const nn::Module& module) {
  std::vector<float> all;
  for (const auto& [name, t] : module.state_dict()) {
    for (float x : t.to_vector<float>()) all.push_back(x);
  }
  return all;
}

int count_all_reduces(const std::vector<Tensor>& tensors) {
  const std::string text = tensors_text(tensors);
  int count = 0;
  for (std::size_t at = text.find(" all_reduce("); at != std::string::npos;
       at = text.find(" all_reduce(", at + 1)) {
    ++count;
  }
  return count;
}

TEST_P(Ddp, ConstructionGivesEveryReplicaTheMastersParametersAndBuffers) {
  const auto states = on_replicas<std::vector<float>>([&](int r) {
    set_rng_state(static_cast<uint64_t>(100 + r));  // every replica initialises its own way
    DistributedDataParallel ddp(std::make_shared<ThreeLayers>());
    mark_step();
    return flat_state(ddp);
  });
  set_rng_state(100);
  const ThreeLayers master;
  const std::vector<float> want = flat_state(master);
  for (int r = 0; r < n(); ++r) EXPECT_EQ(states[r], want) << "replica " << r;
}

TEST_P(MultiDdp, ForwardGivesEveryReplicaTheMastersBuffers) {
  const auto buffers = on_replicas<std::vector<float>>([&](int r) {
    DistributedDataParallel ddp(std::make_shared<ThreeLayers>());
    const Tensor steps = ddp.named_buffers().at(0).second;
    steps.copy_(full({3}, static_cast<double>(r + 2)));  // replicas drift apart
    (void)ddp(input_of(r));
    mark_step();
    return steps.to_vector<float>();
  });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(buffers[r], std::vector<float>(3, 2.0f)) << r;
}

TEST_P(Ddp, StateDictNamesAreTheModulesUnderModuleDot) {
  auto inner = std::make_shared<ThreeLayers>();
  const DistributedDataParallel ddp(inner);
  const nn::StateDict outer = ddp.state_dict();
  const nn::StateDict wrapped = inner->state_dict();
  ASSERT_EQ(outer.size(), wrapped.size());
  for (std::size_t i = 0; i < outer.size(); ++i) {
    EXPECT_EQ(outer[i].first, "module." + wrapped[i].first);
    EXPECT_EQ(outer[i].second.impl(), wrapped[i].second.impl()) << outer[i].first;
  }
  EXPECT_EQ(ddp.module(), inner);
}

// Buckets hold the parameters in reverse order, each within the cap unless a single parameter
// exceeds it, each as full as the cap lets it be; one all_reduce per bucket goes into the graph.
TEST_P(Ddp, BucketsFollowReverseParameterOrderWithinTheCapOneAllReduceEach) {
  for (const double cap_bytes : {1e9, 200.0, 100.0, 40.0, 4.0}) {
    on_replicas<int>([&](int r) {
      DistributedDataParallel ddp(std::make_shared<ThreeLayers>(),
                                  {.bucket_cap_mb = cap_bytes / (1024.0 * 1024.0)});
      mark_step();  // the construction's broadcast, an all_reduce of its own
      std::vector<std::string> reversed;
      std::vector<int64_t> bytes_of;
      const nn::StateDict params = ddp.named_parameters();
      for (auto it = params.rbegin(); it != params.rend(); ++it) reversed.push_back(it->first);
      const auto layout = ddp.bucket_layout();
      std::vector<std::string> joined;
      std::size_t next = 0;
      for (std::size_t b = 0; b < layout.size(); ++b) {
        int64_t bytes = 0;
        for (const std::string& name : layout[b]) {
          joined.push_back(name);
          bytes += 4 * nn::find(params, name)->numel();
        }
        next += layout[b].size();
        EXPECT_TRUE(bytes <= cap_bytes || layout[b].size() == 1)
            << "bucket " << b << " holds " << bytes << " bytes over a cap of " << cap_bytes;
        if (next < reversed.size()) {  // the next parameter would not have fitted
          EXPECT_GT(bytes + 4 * nn::find(params, reversed[next])->numel(), cap_bytes)
              << "bucket " << b;
        }
      }
      EXPECT_EQ(joined, reversed);

      sum(ddp(input_of(r))).backward();
      std::vector<Tensor> grads;
      for (const auto& [name, p] : params) grads.push_back(p.grad());
      EXPECT_EQ(count_all_reduces(grads), n() == 1 ? 0 : static_cast<int>(layout.size()))
          << "cap " << cap_bytes;
      mark_step();
      return 0;
    });
  }
}

// The gradients after backward are the mean of every replica's own, computed apart; the
// optimizer steps on them; optimizer_step does not average them a second time.
TEST_P(Ddp, BackwardAveragesTheGradientsAndOptimizerStepDoesNotAgain) {
  set_rng_state(7);
  ThreeLayers reference;
  std::vector<std::vector<float>> want;  // per parameter: the mean gradient
  for (int r = 0; r < n(); ++r) {
    reference.zero_grad();
    sum(reference(input_of(r))).backward();
    const nn::StateDict params = reference.named_parameters();
    want.resize(params.size());
    for (std::size_t p = 0; p < params.size(); ++p) {
      const std::vector<float> g = params[p].second.grad().to_vector<float>();
      want[p].resize(g.size(), 0.0f);
      for (std::size_t i = 0; i < g.size(); ++i) want[p][i] += g[i] / static_cast<float>(n());
    }
  }
  on_replicas<int>([&](int r) {
    set_rng_state(7);
    DistributedDataParallel ddp(std::make_shared<ThreeLayers>(), {.bucket_cap_mb = 1e-4});
    mark_step();  // the construction's broadcast, an all_reduce of its own
    optim::SGD sgd(ddp.parameters(), {.lr = 0.5});
    sum(ddp(input_of(r))).backward();
    const nn::StateDict params = ddp.named_parameters();
    for (std::size_t p = 0; p < params.size(); ++p) {
      const std::vector<float> g = params[p].second.grad().to_vector<float>();
      EXPECT_EQ(g.size(), want[p].size());
      if (g.size() != want[p].size()) continue;
      for (std::size_t i = 0; i < g.size(); ++i) {
        EXPECT_NEAR(g[i], want[p][i], 1e-6) << params[p].first << " at " << i << " replica " << r;
      }
    }
    // Another step: optimizer_step must step without tracing any all_reduce of its own.
    sum(ddp(input_of(r + 1))).backward();
    optimizer_step(sgd);
    EXPECT_EQ(count_all_reduces(ddp.parameters()),
              n() == 1 ? 0 : static_cast<int>(ddp.bucket_layout().size()));
    mark_step();
    return 0;
  });
}

// k micro-batches under no_sync() and one outside it give every replica the average over
// replicas of the sum of its micro-batches' gradients — one big batch's averaged gradient of the
// summed loss — with one all_reduce per bucket, traced by the last backward alone.
TEST_P(Ddp, NoSyncAccumulatesLocallyAndTheNextBackwardAveragesTheSum) {
  constexpr int kMicro = 3;
  set_rng_state(9);
  ThreeLayers reference;
  std::vector<std::vector<float>> want;  // per parameter: the mean over replicas of the sum
  for (int r = 0; r < n(); ++r) {
    for (int k = 0; k < kMicro; ++k) {
      reference.zero_grad();
      sum(reference(input_of(r * kMicro + k))).backward();
      const nn::StateDict params = reference.named_parameters();
      want.resize(params.size());
      for (std::size_t p = 0; p < params.size(); ++p) {
        const std::vector<float> g = params[p].second.grad().to_vector<float>();
        want[p].resize(g.size(), 0.0f);
        for (std::size_t i = 0; i < g.size(); ++i) want[p][i] += g[i] / static_cast<float>(n());
      }
    }
  }
  const auto grads_of = [](const nn::Module& module) {
    std::vector<Tensor> grads;
    for (const Tensor& p : module.parameters()) grads.push_back(p.grad());
    return grads;
  };
  on_replicas<int>([&](int r) {
    set_rng_state(9);
    DistributedDataParallel ddp(std::make_shared<ThreeLayers>(), {.bucket_cap_mb = 1e-4});
    mark_step();  // the construction's broadcast, an all_reduce of its own
    EXPECT_TRUE(ddp.require_backward_grad_sync());
    for (int k = 0; k + 1 < kMicro; ++k) {
      const auto guard = ddp.no_sync();
      EXPECT_FALSE(ddp.require_backward_grad_sync());
      { const auto nested = ddp.no_sync(); }
      EXPECT_FALSE(ddp.require_backward_grad_sync()) << "a nested guard turned syncing back on";
      sum(ddp(input_of(r * kMicro + k))).backward();
      EXPECT_EQ(count_all_reduces(grads_of(ddp)), 0) << "micro-batch " << k;
    }
    EXPECT_TRUE(ddp.require_backward_grad_sync());
    sum(ddp(input_of(r * kMicro + kMicro - 1))).backward();
    EXPECT_EQ(count_all_reduces(grads_of(ddp)),
              n() == 1 ? 0 : static_cast<int>(ddp.bucket_layout().size()));
    const nn::StateDict params = ddp.named_parameters();
    for (std::size_t p = 0; p < params.size(); ++p) {
      const std::vector<float> g = params[p].second.grad().to_vector<float>();
      EXPECT_EQ(g.size(), want[p].size());
      if (g.size() != want[p].size()) continue;
      for (std::size_t i = 0; i < g.size(); ++i) {
        EXPECT_NEAR(g[i], want[p][i], 1e-5) << params[p].first << " at " << i << " replica " << r;
      }
    }
    mark_step();
    return 0;
  });
}

TEST_P(Ddp, AParameterWithoutGradientIsAnErrorNamingIt) {
  on_replicas<int>([&](int r) {
    DistributedDataParallel ddp(std::make_shared<ThreeLayers>(/*use_last=*/false));
    try {
      sum(ddp(input_of(r))).backward();
      ADD_FAILURE() << "backward did not throw";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("module.fc3.weight, module.fc3.bias"), std::string::npos) << what;
      EXPECT_NE(what.find("find_unused_parameters"), std::string::npos) << what;
      EXPECT_NE(what.find("distributed_data_parallel_test.cpp"), std::string::npos) << what;
      EXPECT_EQ(what.find("fc2"), std::string::npos) << what;
    }
    mark_step();
    return 0;
  });
}

// Replicas must trace the same graph (actors/host/replica_host.cpp compares them), so a parameter
// left out is left out on every replica: its gradient is the average of zeros, and the others'
// are averaged as always.
TEST_P(Ddp, FindUnusedParametersAveragesTheirGradientsAsZeros) {
  on_replicas<int>([&](int r) {
    DistributedDataParallel ddp(std::make_shared<ThreeLayers>(/*use_last=*/false),
                                {.bucket_cap_mb = 1e-4, .find_unused_parameters = true});
    mark_step();  // the construction's broadcast, an all_reduce of its own
    sum(ddp(input_of(r))).backward();
    std::vector<Tensor> grads;
    for (const auto& [name, p] : ddp.named_parameters()) {
      EXPECT_TRUE(p.grad().defined()) << name;
      grads.push_back(p.grad());
    }
    EXPECT_EQ(count_all_reduces(grads),
              n() == 1 ? 0 : static_cast<int>(ddp.bucket_layout().size()));
    for (const auto& [name, p] : ddp.named_parameters()) {
      if (!name.starts_with("module.fc3")) continue;
      for (float g : p.grad().to_vector<float>()) EXPECT_EQ(g, 0.0f) << name;
    }
    mark_step();
    return 0;
  });
}

TEST_P(MultiDdp, AReplicaFailingMidStepFailsThemAllWithoutAHang) {
  try {
    spawn([&](int r) {
      DistributedDataParallel ddp(std::make_shared<ThreeLayers>());
      optim::SGD sgd(ddp.parameters(), {.lr = 0.1});
      for (int step = 0; step < 3; ++step) {
        const Tensor loss = sum(ddp(input_of(r)));
        if (r == n() - 1 && step == 1) throw std::runtime_error("replica fails mid-step");
        loss.backward();
        sgd.step();
        mark_step();
        (void)loss.item<float>();
      }
    });
    FAIL() << "spawn did not throw";
  } catch (const ReplicaError& e) {
    EXPECT_NE(std::string(e.what()).find("replica fails mid-step"), std::string::npos) << e.what();
  }
}

// A small GPT trained for 20 steps with DDP on n replicas, each a slice of the global batch,
// gives the losses of one device on the whole batch.
TEST_P(Ddp, GptLossesMatchOneDeviceOnTheGlobalBatch) {
  constexpr int kSteps = 20;
  constexpr int64_t kGlobalBatch = 8;
  set_rng_state(11);
  samples::Gpt single(gpt_steps::kTinyGpt);
  const std::vector<float> want = gpt_steps::train(single, kSteps, 0, kGlobalBatch);

  const int64_t rows = kGlobalBatch / n();
  const auto got = on_replicas<std::vector<float>>([&](int r) {
    set_rng_state(static_cast<uint64_t>(11 + r));  // the master's initialisation wins
    DistributedDataParallel ddp(std::make_shared<samples::Gpt>(gpt_steps::kTinyGpt),
                                {.bucket_cap_mb = 0.01});  // several buckets
    return gpt_steps::train(ddp, kSteps, r * rows, rows);
  });
  gpt_steps::expect_mean_matches(got, want);
}

}  // namespace
}  // namespace axle
