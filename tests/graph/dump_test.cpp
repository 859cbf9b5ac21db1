// Tests graph/dump.h: the text and Graphviz dumps of traced graphs.
#include "axle/graph/dump.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>

#include "axle/engine/config.h"
#include "axle/graph/ops.h"

namespace axle {
namespace {

Tensor device_data_tensor(const Shape& shape, DType dtype = DType::kFloat32) {
  return Tensor(
      make_intrusive<TensorImpl>(dtype, make_intrusive<DeviceData>(Device{}, dtype, shape)));
}

std::size_t line_count(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Leaves XLA_IR_DEBUG unset around every test.
class Dump : public ::testing::Test {
 protected:
  void SetUp() override { config::unset("XLA_IR_DEBUG"); }
  void TearDown() override { config::unset("XLA_IR_DEBUG"); }
};

TEST_F(Dump, TextListsNodesInPostOrderWithAttributes) {
  const Tensor x = device_data_tensor({2, 3});
  const Tensor y = x * 0.5;
  const Tensor z = sum(y + 1.0, {1});
  EXPECT_EQ(tensors_text({y, z}),
            "IR {\n"
            "  %0 = f32[2,3] device_data\n"
            "  %1 = f32[] parameter\n"
            "  %2 = f32[2,3] mul(%0, %1)\n"
            "  %3 = f32[] constant(1)\n"
            "  %4 = f32[2,3] add(%2, %3)\n"
            "  %5 = f32[2] sum(%4), ints=[0,1]\n"
            "  outputs: %2, %5\n"
            "}\n");
}

TEST_F(Dump, TextShowsRealsAndSharedOperandsOnce) {
  const Tensor r = arange(0, 4, 2, DType::kInt64);
  const Tensor s = r + r;
  EXPECT_EQ(tensors_text({s}),
            "IR {\n"
            "  %0 = s64[2] arange, reals=[0,2]\n"
            "  %1 = s64[2] add(%0, %0)\n"
            "  outputs: %1\n"
            "}\n");
}

TEST_F(Dump, TensorsHoldingDataAreDeviceDataLeaves) {
  const Tensor x = device_data_tensor({4}, DType::kInt32);
  const Tensor y = neg(x);
  EXPECT_EQ(tensors_text({x, y, Tensor{}}),
            "IR {\n"
            "  %0 = s32[4] device_data\n"
            "  %1 = s32[4] neg(%0)\n"
            "  outputs: %0, %1, undefined\n"
            "}\n");
}

TEST_F(Dump, IrDebugAddsTheSourceLineOfEachNode) {
  config::set("XLA_IR_DEBUG", "1");
  const Tensor x = device_data_tensor({2});
  const auto [y, line] = std::pair{x * 0.5, __LINE__};  // one line: the op's and __LINE__
  const std::string text = tensors_text({y});
  const std::string at = "  # dump_test.cpp:" + std::to_string(line) + "\n";
  EXPECT_TRUE(contains(text, "  %2 = f32[2] mul(%0, %1)" + at)) << text;
  EXPECT_TRUE(contains(text, "  %1 = f32[] parameter" + at)) << text;
  EXPECT_TRUE(contains(text, "IR {\n")) << text;
  config::unset("XLA_IR_DEBUG");
  EXPECT_FALSE(contains(tensors_text({y}), "#"));
}

TEST_F(Dump, DotHasANodePerIrNodeAndAnEdgePerOperand) {
  const Tensor x = device_data_tensor({2, 3});
  const Tensor y = sub(x, exp(x));
  const std::string dot = tensors_dot({y});
  EXPECT_EQ(dot.rfind("digraph G {\n", 0), 0u) << dot;
  EXPECT_TRUE(contains(dot, "  node0 [label=\"device_data\\nf32[2,3]\"];\n")) << dot;
  EXPECT_TRUE(contains(dot, "  node1 [label=\"exp\\nf32[2,3]\"];\n")) << dot;
  EXPECT_TRUE(contains(dot, "  node2 [label=\"sub\\nf32[2,3]\\nROOT=0\"];\n")) << dot;
  EXPECT_TRUE(contains(dot, "  node0 -> node1;\n")) << dot;
  EXPECT_TRUE(contains(dot, "  node0 -> node2 [label=\"i=0\"];\n")) << dot;
  EXPECT_TRUE(contains(dot, "  node1 -> node2 [label=\"i=1\"];\n")) << dot;
  EXPECT_EQ(line_count(dot), 2u + 3u + 3u);  // braces, nodes, edges
}

TEST_F(Dump, DotLabelsCarryAttributes) {
  const std::string dot = tensors_dot({sum(device_data_tensor({2, 3}), {0}, true)});
  EXPECT_TRUE(contains(dot, "  node1 [label=\"sum\\nf32[1,3]\\nints=[1,0]\\nROOT=0\"];\n")) << dot;
}

TEST_F(Dump, AMillionNodeChainDumpsWithoutRecursion) {
  Tensor x = device_data_tensor({2});
  for (int i = 0; i < 1'000'000; ++i) x = relu(x);
  const std::string text = tensors_text({x});
  EXPECT_EQ(line_count(text), 1'000'001u + 3u);  // the leaf, the relus, header/outputs/footer
  EXPECT_TRUE(contains(text, "  %1000000 = f32[2] relu(%999999)\n"));
  const std::string dot = tensors_dot({x});
  EXPECT_EQ(line_count(dot), 1'000'001u + 1'000'000u + 2u);
}

}  // namespace
}  // namespace axle
