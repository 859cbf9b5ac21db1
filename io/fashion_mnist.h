// io: Fashion-MNIST (Xiao, Rasul and Vollgraf, 2017), read from its four IDX files. The files
// are named as MNIST's are, so pointing the dataset at an MNIST directory reads MNIST.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include "axle/io/dataset.h"

namespace axle {

/// Which half of a dataset: the training set or the held-out test set.
enum class Split : uint8_t {
  kTrain,  ///< the training set (the train-* files)
  kTest    ///< the test set (the t10k-* files)
};

/// Fashion-MNIST: 28x28 grey images of clothing in 10 classes, 60,000 for training and 10,000
/// for testing. Samples are {image f32 [1,28,28] in [0,1], label s64 []}, as torchvision's
/// FashionMNIST with ToTensor() gives them.
class FashionMnist final : public Dataset {
 public:
  /// Where Debian's dataset-fashion-mnist package installs the files.
  static constexpr std::string_view kDefaultDir = "/usr/share/datasets/fashion-mnist";
  /// The number of classes (labels 0 to 9).
  static constexpr int64_t kNumClasses = 10;
  /// The height and width of each image, in pixels.
  static constexpr int64_t kSide = 28;
  /// The class names, indexed by label.
  static constexpr std::array<std::string_view, kNumClasses> kClassNames = {
      "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
      "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

  /// Loads `split` from `dir`, which holds {train,t10k}-images-idx3-ubyte and
  /// {train,t10k}-labels-idx1-ubyte, each gzip-compressed (".gz") or not. Throws FileError naming
  /// the file when one is missing or damaged, when images are not u8 [N,28,28] or labels not
  /// u8 [N] below 10, or when the two files hold different numbers of samples.
  explicit FashionMnist(Split split, const std::filesystem::path& dir = kDefaultDir);

  [[nodiscard]] int64_t size() const override { return size_; }
  /// {image f32 [1,28,28] in [0,1] (pixel / 255), label s64 []}.
  [[nodiscard]] Sample get(int64_t index) const override;
  /// The label of sample `index`, without building its image.
  [[nodiscard]] int64_t label(int64_t index) const;

  /// The path of one of the split's files in `dir`: `stem` ("train-images-idx3-ubyte") with
  /// ".gz" when that exists, else without. Throws FileError naming both when neither exists.
  [[nodiscard]] static std::filesystem::path find_file(const std::filesystem::path& dir,
                                                       std::string_view stem);

 private:
  int64_t size_ = 0;
  std::vector<std::byte> pixels_;  // u8 as in the file: a quarter of f32's memory
  std::vector<std::byte> labels_;
};

}  // namespace axle
