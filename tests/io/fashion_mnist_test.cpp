// Tests io/fashion_mnist.h: loading the four IDX files, checking them against each other, and
// the installed dataset.
#include "axle/io/fashion_mnist.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

#include "axle/graph/formats/error.h"
#include "io_test_util.h"

namespace axle {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_message;
using testing::gzip;
using testing::TempDir;
using testing::write_file;

std::vector<uint8_t> header(uint8_t type, const std::vector<uint32_t>& dims) {
  std::vector<uint8_t> out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  }
  return out;
}

// `n` images whose pixel p of image i is (i * 7 + p) % 256, and labels i % 10.
std::vector<uint8_t> images_file(uint32_t n, uint32_t side = 28) {
  std::vector<uint8_t> out = header(0x08, {n, side, side});
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t p = 0; p < side * side; ++p)
      out.push_back(static_cast<uint8_t>((i * 7 + p) % 256));
  }
  return out;
}
std::vector<uint8_t> labels_file(uint32_t n, uint8_t first = 0) {
  std::vector<uint8_t> out = header(0x08, {n});
  for (uint32_t i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>((first + i) % 10));
  return out;
}

TEST(FashionMnist, LoadsGzipFilesOfTheTrainSplit) {
  TempDir dir;
  write_file(dir / "train-images-idx3-ubyte.gz", gzip(images_file(3)));
  write_file(dir / "train-labels-idx1-ubyte.gz", gzip(labels_file(3, 4)));
  const FashionMnist data(Split::kTrain, dir.path());
  ASSERT_EQ(data.size(), 3);
  const Sample s = data.get(2);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].dtype, DType::kFloat32);
  EXPECT_EQ(s[0].shape, (Shape{1, 28, 28}));
  const std::vector<float> pixels = s[0].values<float>();
  EXPECT_FLOAT_EQ(pixels[0], 14.0f / 255.0f);
  EXPECT_FLOAT_EQ(pixels[241], 1.0f);  // (2 * 7 + 241) % 256 = 255
  EXPECT_EQ(s[1].dtype, DType::kInt64);
  EXPECT_EQ(s[1].shape, Shape{});
  EXPECT_EQ(s[1].values<int64_t>(), std::vector<int64_t>{6});
  EXPECT_EQ(data.label(0), 4);
}

TEST(FashionMnist, LoadsPlainFilesOfTheTestSplit) {
  TempDir dir;
  write_file(dir / "t10k-images-idx3-ubyte", images_file(2));
  write_file(dir / "t10k-labels-idx1-ubyte", labels_file(2));
  const FashionMnist data(Split::kTest, dir.path());
  EXPECT_EQ(data.size(), 2);
  EXPECT_EQ(data.get(1)[1].values<int64_t>(), std::vector<int64_t>{1});
  EXPECT_THROW((void)data.get(2), std::out_of_range);
}

TEST(FashionMnist, MissingFilesNameThePathAndThePackage) {
  TempDir dir;
  const std::string message =
      error_message<FileError>([&] { FashionMnist(Split::kTrain, dir.path()); });
  EXPECT_TRUE(contains(message, (dir / "train-images-idx3-ubyte.gz").string() + ": no such file"))
      << message;
  EXPECT_TRUE(contains(message, "dataset-fashion-mnist")) << message;
}

TEST(FashionMnist, CountMismatchNamesBothFiles) {
  TempDir dir;
  write_file(dir / "train-images-idx3-ubyte", images_file(3));
  write_file(dir / "train-labels-idx1-ubyte", labels_file(2));
  const std::string message =
      error_message<FileError>([&] { FashionMnist(Split::kTrain, dir.path()); });
  EXPECT_TRUE(contains(message,
                       "train-labels-idx1-ubyte: holds 2 labels but "
                       "train-images-idx3-ubyte holds 3 images"))
      << message;
}

TEST(FashionMnist, WrongImageDimensionsAreReported) {
  TempDir dir;
  write_file(dir / "train-images-idx3-ubyte", images_file(2, 27));
  write_file(dir / "train-labels-idx1-ubyte", labels_file(2));
  const std::string message =
      error_message<FileError>([&] { FashionMnist(Split::kTrain, dir.path()); });
  EXPECT_TRUE(contains(message,
                       "train-images-idx3-ubyte: holds u8 [2,27,27], but Fashion-MNIST "
                       "images are u8 [N,28,28]"))
      << message;
}

TEST(FashionMnist, LabelsThatAreNotU8VectorsAreReported) {
  TempDir dir;
  write_file(dir / "train-images-idx3-ubyte", images_file(1));
  std::vector<uint8_t> labels = header(0x08, {1, 1});
  labels.push_back(0);
  write_file(dir / "train-labels-idx1-ubyte", labels);
  const std::string message =
      error_message<FileError>([&] { FashionMnist(Split::kTrain, dir.path()); });
  EXPECT_TRUE(contains(message, "holds u8 [1,1], but Fashion-MNIST labels are u8 [N]")) << message;
}

TEST(FashionMnist, LabelsOutsideTheClassesAreReported) {
  TempDir dir;
  write_file(dir / "train-images-idx3-ubyte", images_file(2));
  std::vector<uint8_t> labels = header(0x08, {2});
  labels.push_back(3);
  labels.push_back(12);
  write_file(dir / "train-labels-idx1-ubyte", labels);
  const std::string message =
      error_message<FileError>([&] { FashionMnist(Split::kTrain, dir.path()); });
  EXPECT_TRUE(contains(message, "label 12 of sample 1 is not a class")) << message;
}

TEST(FashionMnist, TruncatedImagesFileIsReported) {
  TempDir dir;
  std::vector<uint8_t> images = images_file(2);
  images.resize(images.size() - 10);
  write_file(dir / "train-images-idx3-ubyte.gz", gzip(images));
  write_file(dir / "train-labels-idx1-ubyte.gz", gzip(labels_file(2)));
  const std::string message =
      error_message<FileError>([&] { FashionMnist(Split::kTrain, dir.path()); });
  EXPECT_TRUE(contains(message, "train-images-idx3-ubyte.gz: truncated")) << message;
}

// The dataset as Debian's dataset-fashion-mnist installs it (./axle.sh deps installs it).
TEST(FashionMnist, ReadsTheInstalledDataset) {
  ASSERT_TRUE(fs::exists(fs::path(FashionMnist::kDefaultDir) / "train-images-idx3-ubyte.gz"))
      << "Fashion-MNIST is not installed in " << FashionMnist::kDefaultDir
      << ": run ./axle.sh deps";
  const FashionMnist train(Split::kTrain);
  const FashionMnist test(Split::kTest);
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(test.size(), 10000);
  for (const FashionMnist* data : {&train, &test}) {
    const Sample s = data->get(data->size() - 1);
    EXPECT_EQ(s[0].shape, (Shape{1, 28, 28}));
    const std::vector<float> pixels = s[0].values<float>();
    EXPECT_GE(*std::min_element(pixels.begin(), pixels.end()), 0.0f);
    EXPECT_LE(*std::max_element(pixels.begin(), pixels.end()), 1.0f);
    EXPECT_GT(*std::max_element(pixels.begin(), pixels.end()), 0.5f);  // not a blank image
  }
  // The training set is balanced: 6,000 of each class.
  std::vector<int> counts(FashionMnist::kNumClasses);
  for (int64_t i = 0; i < train.size(); ++i) ++counts[static_cast<std::size_t>(train.label(i))];
  for (int count : counts) EXPECT_EQ(count, 6000);
}

}  // namespace
}  // namespace axle
