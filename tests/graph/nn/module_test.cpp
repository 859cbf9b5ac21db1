// graph/nn/module.h end to end: parameter and buffer names and
// their order, tied parameters, train/eval and zero_grad through the tree, load_state_dict (its
// errors, values from another device) and to(device), all as torch.nn.Module does them.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/graph/nn_test_util.h"

namespace axle::testing {
namespace {

using Module = NnTest;
using nn::StateDict;

std::vector<std::string> names(const StateDict& state) {
  std::vector<std::string> out;
  for (const auto& [name, tensor] : state) out.push_back(name);
  return out;
}

/// A module with a parameter and a buffer of its own besides its submodules.
class Net : public nn::Module {
 public:
  Net() {
    register_parameter("scale", ones({2}));
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(3, 4));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(4, 2));
    register_buffer("calls", zeros({}));
  }
  Tensor forward(const Tensor& x) override {
    return fc2->forward(relu(fc1->forward(x))) * parameter(0);
  }
  std::shared_ptr<nn::Linear> fc1, fc2;
};

/// x -> decoder(encoder(x)), both without bias; `tie` makes the decoder use the encoder's weight.
class AutoEncoder : public nn::Module {
 public:
  explicit AutoEncoder(bool tie) {
    encoder = register_module("encoder", std::make_shared<nn::Linear>(2, 2, false));
    decoder = register_module("decoder", std::make_shared<nn::Linear>(2, 2, false));
    if (tie) this->tie();
  }
  void tie() { decoder->set_parameter("weight", encoder->weight()); }
  Tensor forward(const Tensor& x) override { return decoder->forward(encoder->forward(x)); }
  std::shared_ptr<nn::Linear> encoder, decoder;
};

std::shared_ptr<nn::Sequential> mlp() {
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(2, 3), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(3, 1)});
}

// Every value of a state dict, in order.
std::vector<std::vector<double>> snapshot(const StateDict& state) {
  std::vector<std::vector<double>> out;
  for (const auto& [name, tensor] : state) out.push_back(values(tensor));
  return out;
}

TEST_F(Module, NamedParametersAreDottedOwnFirstInRegistrationOrder) {
  const Net net;
  EXPECT_EQ(
      names(net.named_parameters()),
      (std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  const std::vector<Tensor> params = net.parameters();
  ASSERT_EQ(params.size(), 5u);
  EXPECT_EQ(params[1].impl(), net.fc1->weight().impl());
  EXPECT_EQ(params[4].impl(), net.fc2->bias().impl());
  EXPECT_EQ(params[1].shape(), (Shape{4, 3}));
  for (const Tensor& p : params) EXPECT_TRUE(p.requires_grad());
}

TEST_F(Module, SequentialNamesItsChildrenByPosition) {
  const auto seq = mlp();
  EXPECT_EQ(seq->size(), 3u);
  EXPECT_EQ(names(seq->named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  const std::vector<float> x{1, -2};
  const Tensor out = seq->forward(tensor(x, {1, 2}));
  const auto* first = dynamic_cast<nn::Linear*>(seq->named_children()[0].second.get());
  const auto* last = dynamic_cast<nn::Linear*>(seq->named_children()[2].second.get());
  ASSERT_TRUE(first && last);
  const std::vector<double> w1 = values(first->weight()), b1 = values(first->bias());
  const std::vector<double> w2 = values(last->weight()), b2 = values(last->bias());
  double want = b2[0];
  for (int j = 0; j < 3; ++j) {
    const double h = std::max(0.0, w1[j * 2] * x[0] + w1[j * 2 + 1] * x[1] + b1[j]);
    want += w2[j] * h;
  }
  EXPECT_NEAR(out.item(), want, 1e-6);
}

TEST_F(Module, StateDictListsParametersThenBuffersOfEachModuleThenItsChildren) {
  const Net net;
  EXPECT_EQ(names(net.state_dict()),
            (std::vector<std::string>{"scale", "calls", "fc1.weight", "fc1.bias", "fc2.weight",
                                      "fc2.bias"}));
  EXPECT_EQ(names(net.named_buffers()), (std::vector<std::string>{"calls"}));
  nn::Sequential seq({std::make_shared<nn::Conv2d>(1, 2, std::vector<int64_t>{3}),
                      std::make_shared<nn::BatchNorm2d>(2)});
  EXPECT_EQ(names(seq.state_dict()),
            (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                      "1.running_var", "1.num_batches_tracked"}));
  EXPECT_EQ(names(seq.named_buffers()),
            (std::vector<std::string>{"1.running_mean", "1.running_var", "1.num_batches_tracked"}));
}

TEST_F(Module, StateDictHoldsTheModulesOwnHandles) {
  // As torch, the state dict's tensors are the parameters: an in-place update shows through.
  auto seq = mlp();
  const StateDict state = seq->state_dict();
  const std::vector<Tensor> params = seq->parameters();
  {
    NoGradGuard no_grad;  // parameters change in place only outside autograd, as in torch
    params[0].copy_(params[0] * 2.0 + 1.0);
  }
  sync_step();
  EXPECT_EQ(state[0].second.impl(), params[0].impl());
  EXPECT_EQ(values(state[0].second), values(params[0]));
}

TEST_F(Module, ABiasTurnedOffIsNoParameter) {
  const nn::Linear fc(3, 2, false);
  EXPECT_EQ(names(fc.named_parameters()), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(names(fc.state_dict()), (std::vector<std::string>{"weight"}));
  EXPECT_FALSE(fc.bias().defined());
}

TEST_F(Module, TiedParameterIsOneParameterUnderBothNamesInTheStateDict) {
  const AutoEncoder model(true);
  EXPECT_EQ(names(model.named_parameters()), (std::vector<std::string>{"encoder.weight"}));
  EXPECT_EQ(model.parameters().size(), 1u);
  const StateDict state = model.state_dict();
  EXPECT_EQ(names(state), (std::vector<std::string>{"encoder.weight", "decoder.weight"}));
  EXPECT_EQ(state[0].second.impl(), state[1].second.impl());
  // An update through one module is the other's too.
  {
    NoGradGuard no_grad;  // parameters change in place only outside autograd, as in torch
    model.encoder->weight().copy_(tensor(std::vector<float>{1, 2, 3, 4}, {2, 2}));
  }
  EXPECT_EQ(values(model.decoder->weight()), (std::vector<double>{1, 2, 3, 4}));
}

TEST_F(Module, TiedParameterGetsTheGradientOfBothUses) {
  AutoEncoder model(true);
  const std::vector<double> w{0.5, -1, 2, 0.25};  // [2, 2]
  {
    NoGradGuard no_grad;  // parameters change in place only outside autograd, as in torch
    model.encoder->weight().copy_(f32_tensor(w, {2, 2}));
  }
  const std::vector<double> x{1.5, -0.5}, c{0.75, -2};
  sum(model.forward(f32_tensor(x, {1, 2})) * f32_tensor(c, {1, 2})).backward();
  // loss(W) = c . (W (W x)); central differences in double.
  auto loss = [&](const std::vector<double>& v) {
    double h[2], total = 0;
    for (int i = 0; i < 2; ++i) h[i] = v[i * 2] * x[0] + v[i * 2 + 1] * x[1];
    for (int i = 0; i < 2; ++i) total += c[i] * (v[i * 2] * h[0] + v[i * 2 + 1] * h[1]);
    return total;
  };
  std::vector<double> want;
  for (int k = 0; k < 4; ++k) {
    std::vector<double> plus = w, minus = w;
    plus[k] += 1e-6;
    minus[k] -= 1e-6;
    want.push_back((loss(plus) - loss(minus)) / 2e-6);
  }
  ASSERT_TRUE(model.encoder->weight().grad().defined());
  EXPECT_TRUE(all_close(values(model.encoder->weight().grad()), want, 1e-5, 1e-5));
}

TEST_F(Module, SetParameterRejectsAnotherShapeOrAnUnknownName) {
  nn::Linear fc(2, 3);
  auto wrong_shape = [&] { fc.set_parameter("weight", zeros({3, 3})); };
  const int line = __LINE__ - 1;
  std::string what = error_message<nn::StateDictError>(wrong_shape);
  EXPECT_TRUE(contains(what, "\"weight\"")) << what;
  EXPECT_TRUE(contains(what, "f32[3,3]")) << what;
  EXPECT_TRUE(contains(what, at_line(__FILE__, line))) << what;
  what = error_message<nn::StateDictError>([&] { fc.set_parameter("kernel", zeros({3, 2})); });
  EXPECT_TRUE(contains(what, "\"kernel\"")) << what;
}

TEST_F(Module, ReplaceParameterTakesAnyValueAndLeavesAnUndefinedOneOutOfTheLists) {
  Net net;
  EXPECT_EQ(names(net.fc1->own_parameters()), (std::vector<std::string>{"weight", "bias"}));
  net.fc1->replace_parameter("weight", Tensor());
  EXPECT_EQ(names(net.named_parameters()),
            (std::vector<std::string>{"scale", "fc1.bias", "fc2.weight", "fc2.bias"}));
  net.fc1->replace_parameter("weight", ones({7}));  // no shape check: a wrapper's business
  EXPECT_EQ(net.fc1->weight().numel(), 7);
  EXPECT_THROW(net.fc1->replace_parameter("nope", ones({1})), nn::StateDictError);
}

TEST_F(Module, ReplaceBufferAndReplaceModuleSwapWhatTheSlotHolds) {
  Net net;
  net.replace_buffer("calls", ones({3}, DType::kFloat64));
  EXPECT_EQ(net.own_buffers()[0].second.dtype(), DType::kFloat64);
  EXPECT_THROW(net.replace_buffer("nope", ones({1})), nn::StateDictError);
  nn::Sequential seq({std::make_shared<nn::Linear>(2, 2), std::make_shared<nn::ReLU>()});
  seq.replace_module("0", std::make_shared<nn::ReLU>());
  const Tensor x = tensor(std::vector<float>{-1, 2}, Shape({1, 2}));
  EXPECT_EQ(seq(x).to_vector<float>(), (std::vector<float>{0, 2}));  // Sequential runs the new one
  EXPECT_TRUE(seq.named_parameters().empty());
  EXPECT_THROW(seq.replace_module("5", std::make_shared<nn::ReLU>()), nn::StateDictError);
  EXPECT_THROW(seq.replace_module("0", nullptr), nn::StateDictError);
}

TEST_F(Module, TrainAndEvalReachEveryModuleOfTheTree) {
  auto inner = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{std::make_shared<nn::Dropout>(0.5)});
  nn::Sequential outer({std::make_shared<nn::ReLU>(), inner});
  EXPECT_TRUE(outer.is_training());
  outer.eval();
  EXPECT_FALSE(outer.is_training());
  EXPECT_FALSE(inner->is_training());
  EXPECT_FALSE(inner->named_children()[0].second->is_training());
  // The nested Dropout is the identity now.
  const std::vector<double> x{1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(values(outer.forward(f32_tensor(x, {8}))), x);
  outer.train();
  EXPECT_TRUE(inner->named_children()[0].second->is_training());
}

TEST_F(Module, ZeroGradResetsTheGradientOfEveryParameter) {
  auto seq = mlp();
  sum(seq->forward(ones({4, 2}))).backward();
  for (const Tensor& p : seq->parameters()) ASSERT_TRUE(p.grad().defined());
  seq->zero_grad();
  for (const Tensor& p : seq->parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST_F(Module, LoadStateDictCopiesEveryValueIntoTheModulesOwnTensors) {
  auto target = mlp(), source = mlp();
  const std::vector<Tensor> before = target->parameters();
  target->load_state_dict(source->state_dict());
  const std::vector<Tensor> after = target->parameters();
  const std::vector<Tensor> want = source->parameters();
  for (std::size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].impl(), before[i].impl());  // loaded in place, not replaced
    EXPECT_EQ(values(after[i]), values(want[i])) << i;
  }
}

TEST_F(Module, ALoadedModelAndItsSourceTrainIndependently) {
  auto target = mlp(), source = mlp();
  const StateDict state = source->state_dict();
  const std::vector<std::vector<double>> original = snapshot(state);
  target->load_state_dict(state);
  optim::SGD sgd(target->parameters(), {.lr = 0.5});
  for (int step = 0; step < 2; ++step) {
    sgd.zero_grad();
    sum(target->forward(ones({4, 2}))).backward();
    sgd.step();
    sync_step();
  }
  EXPECT_EQ(snapshot(state), original);
  EXPECT_NE(values(target->parameters()[2]), original[2]);
  // And the other way round: updating the source leaves the loaded copy alone.
  const std::vector<std::vector<double>> trained = snapshot(target->state_dict());
  {
    NoGradGuard no_grad;  // parameters change in place only outside autograd, as in torch
    for (const Tensor& p : source->parameters()) p.copy_(p * 0.5 - 1.0);
  }
  sync_step();
  EXPECT_EQ(snapshot(target->state_dict()), trained);
}

// Loads `bad` into `model` and checks that it throws a StateDictError naming `key` (and this
// file's line) and that nothing changed.
void expect_rejected(nn::Module& model, const StateDict& bad, const std::string& key,
                     const std::string& also = "") {
  const std::vector<std::vector<double>> before = snapshot(model.state_dict());
  auto load = [&] { model.load_state_dict(bad); };
  const int line = __LINE__ - 1;
  const std::string what = error_message<nn::StateDictError>(load);
  EXPECT_TRUE(contains(what, "\"" + key + "\"")) << what;
  EXPECT_TRUE(contains(what, at_line(__FILE__, line))) << what;
  if (!also.empty()) {
    EXPECT_TRUE(contains(what, also)) << what;
  }
  EXPECT_EQ(snapshot(model.state_dict()), before);
}

// A state for mlp() with other values than `model`'s, whose entry `key` is `value` (or left out,
// when undefined).
StateDict other_state(const std::string& key, const Tensor& value) {
  StateDict state;
  for (const auto& [name, tensor] : mlp()->state_dict()) {
    if (name != key) {
      state.emplace_back(name, tensor);
    } else if (value.defined()) {
      state.emplace_back(name, value);
    }
  }
  return state;
}

TEST_F(Module, LoadStateDictRejectsAMissingKeyAndLoadsNothing) {
  auto model = mlp();
  expect_rejected(*model, other_state("2.bias", {}), "2.bias", "missing");
}

TEST_F(Module, LoadStateDictRejectsAnUnexpectedKeyAndLoadsNothing) {
  auto model = mlp();
  StateDict bad = other_state("", {});
  bad.emplace_back("2.scale", ones({1}));
  expect_rejected(*model, bad, "2.scale", "unexpected");
}

// A misspelt key is one missing and one unexpected: both are named, as torch names them.
TEST_F(Module, LoadStateDictNamesEveryMissingAndUnexpectedKeyAtOnce) {
  auto model = mlp();
  StateDict bad;
  for (const auto& [name, tensor] : mlp()->state_dict()) {
    if (name == "0.weight") {
      bad.emplace_back("0.wieght", tensor);
    } else if (name != "2.bias") {
      bad.emplace_back(name, tensor);
    }
  }
  expect_rejected(*model, bad, "0.weight",
                  "missing keys \"0.weight\", \"2.bias\"; unexpected key \"0.wieght\"");
}

TEST_F(Module, LoadStateDictRejectsAnotherShapeAndLoadsNothing) {
  auto model = mlp();
  expect_rejected(*model, other_state("2.bias", zeros({2})), "2.bias", "f32[2]");
}

// As torch: load_state_dict copies each value with copy_, which casts, so an f16 checkpoint loads
// into an f32 model and its parameters stay f32.
TEST_F(Module, LoadStateDictCastsAnF16StateIntoAnF32Model) {
  auto model = mlp();
  auto source = mlp();
  StateDict halves;
  std::vector<std::vector<double>> want;
  for (const auto& [name, tensor] : source->state_dict()) {
    const Tensor half = tensor.to(kHalf);
    halves.emplace_back(name, half);
    want.push_back(half.to_vector<double>());  // the f16 values, exactly representable in f32
  }
  model->load_state_dict(halves);
  std::size_t i = 0;
  for (const auto& [name, tensor] : model->state_dict()) {
    EXPECT_EQ(tensor.dtype(), kFloat32) << name;
    EXPECT_EQ(tensor.to_vector<double>(), want[i++]) << name;
  }
  // A shape that differs is still refused, whatever the dtype.
  expect_rejected(*model, other_state("2.bias", zeros({2}, kHalf)), "2.bias", "f16[2]");
}

TEST_F(Module, NonStrictLoadSkipsMissingAndUnexpectedKeys) {
  auto model = mlp();
  const std::vector<double> kept = values(model->parameters()[3]);
  StateDict partial{{"0.weight", tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2})},
                    {"9.weight", zeros({7})}};
  model->load_state_dict(partial, false);
  EXPECT_EQ(values(model->parameters()[0]), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(values(model->parameters()[3]), kept);
}

TEST_F(Module, LoadStateDictTakesValuesFromAnotherDevice) {
  auto model = mlp();
  StateDict state;
  std::vector<std::vector<double>> want;
  std::mt19937 rng(3);
  for (const auto& [name, t] : model->state_dict()) {
    want.push_back(as_f32(uniform_values(rng, t.numel())));
    state.emplace_back(name, f32_tensor(want.back(), t.shape(), Device{1}));
  }
  model->load_state_dict(state);
  const StateDict loaded = model->state_dict();
  for (std::size_t i = 0; i < loaded.size(); ++i) {
    EXPECT_EQ(loaded[i].second.device(), Device{0}) << loaded[i].first;
    EXPECT_EQ(values(loaded[i].second), want[i]) << loaded[i].first;
  }
}

TEST_F(Module, ToMovesEveryParameterAndBufferInPlace) {
  nn::Sequential model({std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::BatchNorm2d>(4)});
  const StateDict before = model.state_dict();
  const std::vector<std::vector<double>> original = snapshot(before);
  model.to(Device{1});
  const StateDict after = model.state_dict();
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].second.impl(), before[i].second.impl()) << after[i].first;
    EXPECT_EQ(before[i].second.device(), Device{1}) << after[i].first;
    EXPECT_EQ(values(before[i].second), original[i]) << after[i].first;
  }
  EXPECT_TRUE(model.parameters()[0].requires_grad());
}

TEST_F(Module, ToTakesAPendingUpdateAlong) {
  auto model = mlp();
  const Tensor w = model->parameters()[0];
  const std::vector<double> start = values(w);
  {
    NoGradGuard no_grad;  // parameters change in place only outside autograd, as in torch
    w.copy_(w * 3.0);     // pending when the move happens
  }
  model->to(Device{1});
  std::vector<double> want = start;
  for (double& v : want) v = static_cast<float>(v * 3);
  EXPECT_EQ(w.device(), Device{1});
  EXPECT_EQ(values(w), want);
}

TEST_F(Module, AMovedModelTrainsOnItsNewDevice) {
  auto model = mlp();
  optim::SGD sgd(model->parameters(), {.lr = 0.1});  // made before the move, as in a script
  model->to(Device{1});
  const std::vector<double> start = values(model->parameters()[3]);
  sum(model->forward(ones({4, 2}, DType::kFloat32, Device{1}))).backward();
  sgd.step();
  sync_step();
  // d(sum of 4 outputs)/d(last bias) = 4.
  EXPECT_NEAR(values(model->parameters()[3])[0], start[0] - 0.1 * 4, 1e-6);
  EXPECT_EQ(model->parameters()[3].device(), Device{1});
}

TEST_F(Module, TiesMadeBeforeToStayTied) {
  AutoEncoder model(true);
  model.to(Device{1});
  EXPECT_EQ(model.parameters().size(), 1u);
  EXPECT_EQ(model.encoder->weight().impl(), model.decoder->weight().impl());
  EXPECT_EQ(model.decoder->weight().device(), Device{1});
  {
    NoGradGuard no_grad;  // parameters change in place only outside autograd, as in torch
    model.encoder->weight().copy_(tensor(std::vector<float>{1, 2, 3, 4}, {2, 2}, Device{1}));
  }
  // decoder(encoder(x)) = W W x with W = [[1, 2], [3, 4]]: W W = [[7, 10], [15, 22]].
  const Tensor x = tensor(std::vector<float>{1, 1}, {1, 2}, Device{1});
  EXPECT_EQ(values(model.forward(x)), (std::vector<double>{17, 37}));
}

TEST_F(Module, TiesMadeAfterToStayTied) {
  AutoEncoder model(false);
  model.to(Device{1});
  model.tie();
  EXPECT_EQ(model.parameters().size(), 1u);
  const StateDict state = model.state_dict();
  EXPECT_EQ(state[0].second.impl(), state[1].second.impl());
  EXPECT_EQ(state[1].second.device(), Device{1});
  model.to(Device{0});
  EXPECT_EQ(model.encoder->weight().impl(), model.decoder->weight().impl());
  EXPECT_EQ(model.decoder->weight().device(), Device{0});
}

}  // namespace
}  // namespace axle::testing
