// A program built against an installed axle (see README.md here): a small MLP learns to classify
// random points by the labels a random linear map gives them, with SGD over a few batches. It
// prints the loss as it falls and exits non-zero unless the loss fell to under half its start.
#include <axle/axle.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

int main() {
  constexpr int kBatches = 4, kBatchSize = 64, kFeatures = 16, kClasses = 4, kSteps = 120;
  axle::Device dev = axle::device(0);

  // The data: each batch's labels are what a fixed random "teacher" map says of its points.
  axle::Tensor teacher = axle::randn({kFeatures, kClasses}, axle::DType::kFloat32, dev);
  std::vector<axle::Tensor> inputs, labels;
  for (int b = 0; b < kBatches; ++b) {
    inputs.push_back(axle::randn({kBatchSize, kFeatures}, axle::DType::kFloat32, dev));
    labels.push_back(axle::argmax(axle::matmul(inputs.back(), teacher), 1));
  }

  axle::nn::Sequential model({std::make_shared<axle::nn::Linear>(kFeatures, 32, true, dev),
                              std::make_shared<axle::nn::ReLU>(),
                              std::make_shared<axle::nn::Linear>(32, kClasses, true, dev)});
  axle::optim::SGD optimizer(model.parameters(), {.lr = 0.1, .momentum = 0.9});

  double first = 0, last = 0;
  for (int step = 0; step < kSteps; ++step) {
    const int b = step % kBatches;
    optimizer.zero_grad();
    axle::Tensor loss = axle::nn::cross_entropy(model(inputs[b]), labels[b]);
    loss.backward();
    optimizer.step();
    axle::mark_step();
    if (step == 0 || step % 20 == 19) {
      const double value = loss.item();
      std::printf("step %3d loss %.4f\n", step, value);
      if (step == 0) first = value;
      last = value;
    }
  }
  const bool learned = std::isfinite(last) && last < 0.5 * first;
  std::printf("consumer: loss %.4f -> %.4f, %s\n", first, last,
              learned ? "learned" : "NOT learned");
  return learned ? 0 : 1;
}
