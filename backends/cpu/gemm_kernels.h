// backends/cpu: the blocked loops (BLIS's five loops) that one instruction set's product kernels
// share. Included only by the files compiled for one instruction set (gemm_avx2.cpp,
// gemm_avx512.cpp); those instantiate run_block with their own Traits inside a namespace of their
// own, so no inline function compiled for a wider instruction set can be picked by the linker for
// code that runs on a narrower one. What gemm.cpp asks of them is declared in gemm.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "axle/backends/cpu/gemm.h"
#include "axle/engine/this_thread.h"

namespace axle::cpu {

// Everything below has internal linkage in each file that includes this header (see above).

namespace gemm_detail {
namespace {

/// The products along k that one chain of FMAs sums (from 0) before the chain is added to the
/// output: a long sum then grows its rounding error with k / kSumDepth + kSumDepth, not with k.
/// Every f32 kernel uses it as its depth block, so their results agree to the bit.
inline constexpr int64_t kSumDepth = kF32SumDepth;

/// Where a register tile adds its sum and writes the result: out = in + sum, or out = sum when
/// `in` is null, then + bias[column] when `bias` is set (the tile's first column's value).
/// `out` is f32 or bf16; only the first `cols` columns are written.
struct TileIo {
  const float* in;
  int64_t ld_in;
  void* out;
  int64_t ld_out;
  bool out_bf16;
  int cols;
  const float* bias = nullptr;
  bool round_bf16 = false;          // an f32 output's values rounded to bf16 first
  const float* residual = nullptr;  // added to an f32 output's values last (row stride ld_out)
};

/// 64-byte-aligned memory kept per thread between calls and grown as needed, so products on a
/// warm thread allocate nothing.
class PackBuffer {
 public:
  PackBuffer() = default;
  PackBuffer(const PackBuffer&) = delete;
  PackBuffer& operator=(const PackBuffer&) = delete;
  ~PackBuffer() { ::operator delete (data_, std::align_val_t{64}); }
  void* get(std::size_t bytes) {
    if (bytes > bytes_) {
      ::operator delete (data_, std::align_val_t{64});
      data_ = nullptr;
      bytes_ = 0;
      data_ = ::operator new (bytes, std::align_val_t{64});
      bytes_ = bytes;
    }
    return data_;
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

inline int64_t min_of(int64_t a, int64_t b) noexcept { return a < b ? a : b; }

/// The calling thread's packing buffers (kept until it exits; engine/this_thread.h).
struct PackBuffers {
  PackBuffer a, b, stage;
};

/// Where a depth block's tiles sum: the output, or for a staged bf16 output (stage set) the f32
/// stage holding rows [stage_row0, ...) x columns [stage_column0, + stage_ld) until the last
/// depth block rounds them into the output.
struct TileSums {
  const Gemm& g;
  float* stage;
  int64_t stage_row0, stage_column0, stage_ld;
  bool first, last;  // the first and the last depth block
};

/// The TileIo of the tile at output (row, column) of `cols` columns.
inline TileIo tile_io(const Gemm& g, const TileSums& sums, int64_t row, int64_t column,
                      int cols) noexcept {
  TileIo tile{};
  tile.cols = cols;
  auto* out_bf16 = static_cast<uint16_t*>(g.out) + row * g.ldc + column;
  if (sums.stage) {
    float* at =
        sums.stage + (row - sums.stage_row0) * sums.stage_ld + (column - sums.stage_column0);
    tile.in = sums.first ? nullptr : at;
    tile.ld_in = sums.stage_ld;
    tile.out = sums.last ? static_cast<void*>(out_bf16) : at;
    tile.ld_out = sums.last ? g.ldc : sums.stage_ld;
    tile.out_bf16 = sums.last;
  } else if (g.out_bf16) {
    tile = {nullptr, 0, out_bf16, g.ldc, true, cols};
  } else {
    float* at = static_cast<float*>(g.out) + row * g.ldc + column;
    tile = {sums.first && !g.accumulate ? nullptr : at, g.ldc, at, g.ldc, false, cols};
  }
  if (sums.last && g.bias) tile.bias = g.bias + column;
  tile.round_bf16 = sums.last && g.round_bf16;
  if (sums.last && g.residual) tile.residual = g.residual + row * g.ldc + column;
  return tile;
}

/// rows [r0, r1) x columns [c0, c1) of `g` on the calling thread: for each block of kColumnBlock
/// columns and kDepth of k, op(b)'s block is packed into panels of kColumns columns; for each
/// block of kRowBlock rows, op(a)'s into panels of kRows rows; then every register tile of the
/// block runs over the packed depth. A tile sums its depth block from 0 and adds the sum to the
/// output (except on the first block, unless accumulating), so each element's bits depend on
/// kDepth only, never on the split into blocks of rows and columns. A bf16 output with
/// more than one depth block is summed in an f32 stage of about 512 rows at a time. The bias
/// is added by the tiles of the last depth block.
///
/// Traits: Packed (the packed element), kRows, kColumns, kDepth, kRowBlock, kColumnBlock,
/// kDepthStep (k per packed element), pack_a, pack_b and tile (see gemm_avx512.cpp). With
/// gelu_input (relu_input), each block of rows and columns takes gelu's (relu's) backward once its
/// sum is written; with relu, relu.
template <class Traits>
void run_block(const Gemm& g, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  using Packed = typename Traits::Packed;
  constexpr int64_t kRows = Traits::kRows, kColumns = Traits::kColumns;
  constexpr int64_t kDepth = Traits::kDepth, kStep = Traits::kDepthStep;
  constexpr int64_t kRowBlock = Traits::kRowBlock, kColumnBlock = Traits::kColumnBlock;
  // op(a) read across its rows over more than one depth block (a weight gradient's activations
  // over many tokens, k along the rows) is packed in blocks of up to kRowsAcross rows, so that
  // each of its lines is read in as few pieces as it can be: from memory, short pieces of many
  // lines leave the prefetchers behind. A shallower block of kRowBlock rows stays in L1.
  const int64_t row_block = g.a.transposed && g.k > kDepth ? Traits::kRowsAcross : kRowBlock;
  const int64_t stage_rows = std::max<int64_t>(512 / row_block, 1) * row_block;
  static_assert(kRowBlock % kRows == 0 && Traits::kRowsAcross % kRows == 0 &&
                Traits::kRowsAcross >= kRowBlock && kDepth % kStep == 0);
  PackBuffers& buffers = this_thread_object<PackBuffers>();
  PackBuffer &a_buffer = buffers.a, &b_buffer = buffers.b, &stage_buffer = buffers.stage;

  const int64_t max_steps = (min_of(kDepth, g.k) + kStep - 1) / kStep;
  const int64_t block_columns = min_of(kColumnBlock, c1 - c0);
  auto* a_pack = static_cast<Packed*>(
      a_buffer.get(sizeof(Packed) * static_cast<std::size_t>(row_block * max_steps)));
  auto* b_pack = static_cast<Packed*>(
      b_buffer.get(sizeof(Packed) * static_cast<std::size_t>((block_columns + kColumns - 1) /
                                                             kColumns * kColumns * max_steps)));
  const bool staged = g.out_bf16 && g.k > kDepth;
  const int64_t chunk_rows = staged ? stage_rows : r1 - r0;
  float* stage = staged ? static_cast<float*>(stage_buffer.get(
                              sizeof(float) * static_cast<std::size_t>(stage_rows * block_columns)))
                        : nullptr;

  for (int64_t jc = c0; jc < c1; jc += kColumnBlock) {
    const int64_t nc = min_of(kColumnBlock, c1 - jc);
    for (int64_t io = r0; io < r1; io += chunk_rows) {
      const int64_t io_end = min_of(r1, io + chunk_rows);
      for (int64_t pc = 0; pc < g.k; pc += kDepth) {
        const int64_t kc = min_of(kDepth, g.k - pc), steps = (kc + kStep - 1) / kStep;
        const bool first = pc == 0, last = pc + kc >= g.k;
        Traits::pack_b(g, jc, nc, pc, kc, b_pack);
        const TileSums sums{g, stage, io, jc, nc, first, last};
        for (int64_t ic = io; ic < io_end; ic += row_block) {
          const int64_t mc = min_of(row_block, io_end - ic);
          Traits::pack_a(g, ic, mc, pc, kc, a_pack);
          for (int64_t jr = 0; jr < nc; jr += kColumns) {
            const Packed* b_panel = b_pack + jr * steps;
            const int cols = static_cast<int>(min_of(kColumns, nc - jr));
            for (int64_t ir = 0; ir < mc; ir += kRows) {
              Traits::tile(static_cast<int>(min_of(kRows, mc - ir)), steps, a_pack + ir * steps,
                           b_panel, tile_io(g, sums, ic + ir, jc + jr, cols));
            }
          }
          // The block's output is final and still in cache: the activation's backward on it now.
          if (last) activations_block(g, ic, ic + mc, jc, jc + nc);
        }
      }
    }
  }
}

}  // namespace
}  // namespace gemm_detail
}  // namespace axle::cpu
