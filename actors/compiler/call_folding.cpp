// actors: lowering's folds.
#include "axle/actors/compiler/call_folding.h"
#include "axle/actors/compiler/fold_context.h"

#include <algorithm>
#include <array>
#include <optional>
#include <span>

namespace axle {
namespace {

bool floating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kBFloat16;
}

// Whether node id is a permute of a rank-4 value swapping its first two dims.
bool swaps_first_dims(const Program& program, std::size_t id) {
  const std::span<const int64_t> ints = program.ints(id);
  return program[id].op == Op::kPermute && program[id].shape.rank() == 4 && ints.size() == 4 &&
         ints[0] == 1 && ints[1] == 0 && ints[2] == 2 && ints[3] == 3;
}

// Whether node id is a permute of a rank-4 value swapping its middle two dims ([B, T, H, D] to
// [B, H, T, D] and back).
bool swaps_middle_dims(const Program& program, std::size_t id) {
  const std::span<const int64_t> ints = program.ints(id);
  return program[id].op == Op::kPermute && program[id].shape.rank() == 4 && ints.size() == 4 &&
         ints[0] == 0 && ints[1] == 2 && ints[2] == 1 && ints[3] == 3;
}

bool is_attention(Kernel kernel) {
  return kernel == Kernel::kScaledDotProductAttention ||
         kernel == Kernel::kScaledDotProductAttentionBackward;
}

// The folds of this file; relu's are in relu_folds.cpp.
struct Folding : FoldContext {
  // Operands stored with their first two dims swapped: layout bits 1 (x) and 2 (w).
  void swapped_operands_into_conv(std::size_t id) {
    KernelCall& call = calls[id];
    int64_t layout = 0;
    for (std::size_t k = 0; k < 2; ++k) {
      const int32_t permute = call.inputs[k];
      if (swaps_first_dims(program, permute) && foldable(permute)) {
        call.inputs[k] = program.operands(permute)[0];
        absorbed[permute] = 1;
        layout |= int64_t{1} << k;
      }
    }
    if (layout != 0) call.ints.push_back(layout);
  }

  // producer(...) + bias, the bias one value per output channel of a convolution (`fits`:
  // per_channel) or per output column of a product (per_column): the producer's kernel adds it
  // as it writes its output, taking the bias as a third operand. A filled constant may be stored
  // as one element (lowering.cpp), so it stays an add.
  template <class Fits>
  void bias_into(std::size_t id, Op producer_op, Fits fits) {
    KernelCall& call = calls[id];
    for (std::size_t k = 0; k < 2; ++k) {
      const int32_t producer = call.inputs[k], bias = call.inputs[1 - k];
      if (program[producer].op != producer_op || !foldable(producer) ||
          calls[producer].inputs.size() != 2 || !(program[producer].shape == program[id].shape) ||
          program[producer].dtype != program[id].dtype ||
          program[bias].dtype != program[id].dtype || !fits(program[bias].shape) ||
          program[bias].op == Op::kConstant) {
        continue;
      }
      KernelCall folded = calls[producer];
      folded.inputs.push_back(bias);
      folded.output = static_cast<int32_t>(id);
      call = std::move(folded);
      absorbed[producer] = 1;
      return;
    }
  }

  // Whether `b` holds one value per column (the last dim) of node id's result.
  [[nodiscard]] bool per_column(const Shape& b, std::size_t id) const {
    const Shape& out = program[id].shape;
    if (b.rank() < 1 || b.rank() > out.rank() || b[b.rank() - 1] != out[out.rank() - 1]) {
      return false;
    }
    for (int d = 0; d + 1 < b.rank(); ++d) {
      if (b[d] != 1) return false;
    }
    return true;
  }

  // Whether `b` holds one value per channel (dim 1) of node id's result.
  [[nodiscard]] bool per_channel(const Shape& b, std::size_t id) const {
    if (b.rank() < 1 || b.rank() > 4 || b.numel() != program[id].shape[1]) return false;
    for (int d = 0; d < b.rank(); ++d) {
      // Dim d of b lines up with dim d + 4 - rank of the output: only dim 1 may be > 1.
      if (b[d] != 1 && d + 4 - b.rank() != 1) return false;
    }
    return true;
  }

  // Whether `w` holds one value per element of a row of layer_norm_backward `id`'s result (its
  // last k dims, any dims before them 1).
  [[nodiscard]] bool per_row_element(const Shape& w, std::size_t id) const {
    const Shape& out = program[id].shape;
    const int64_t k = calls[id].ints[0];
    if (w.rank() < k || w.rank() > out.rank()) return false;
    for (int d = 0; d < w.rank(); ++d) {
      const int from_end = w.rank() - d;
      if (from_end <= k ? w[d] != out[out.rank() - from_end] : w[d] != 1) return false;
    }
    return true;
  }

  // layer_norm_backward(w * g, x), the weight one value per row element (layer_norm's affine
  // weight): the kernel multiplies as it reads the gradient (folded operand 1).
  void weight_into_layer_norm_backward(std::size_t id) {
    KernelCall& call = calls[id];
    const int32_t product = call.inputs[0];
    if (program[product].op != Op::kMul || !foldable(product) ||
        calls[product].kernel != Kernel::kMul || calls[product].inputs.size() != 2) {
      return;
    }
    for (std::size_t k = 0; k < 2; ++k) {
      const int32_t w = calls[product].inputs[k], g = calls[product].inputs[1 - k];
      if (!(program[g].shape == program[id].shape) || program[g].dtype != program[id].dtype ||
          program[w].dtype != program[id].dtype || !per_row_element(program[w].shape, id) ||
          program[w].op == Op::kConstant) {
        continue;
      }
      call.inputs = {g, call.inputs[1], w};
      call.ints.push_back(kLayerNormFoldedWeight);
      absorbed[product] = 1;
      return;
    }
  }

  // residual + layer_norm_backward(...): the kernel adds its result to the residual (folded
  // operand 2, last).
  void layer_norm_backward_into_add(std::size_t id) {
    KernelCall& call = calls[id];
    for (std::size_t k = 0; k < 2; ++k) {
      const int32_t backward = call.inputs[k], residual = call.inputs[1 - k];
      if (program[backward].op != Op::kLayerNormBackward || !foldable(backward) ||
          calls[backward].kernel != Kernel::kLayerNormBackward ||
          !(program[backward].shape == program[id].shape) ||
          program[backward].dtype != program[id].dtype ||
          !(program[residual].shape == program[id].shape) ||
          program[residual].dtype != program[id].dtype) {
        continue;
      }
      KernelCall folded = calls[backward];
      if (folded.ints.size() == 1) folded.ints.push_back(0);
      folded.ints[1] |= kLayerNormFoldedResidual;
      folded.inputs.push_back(residual);
      folded.output = static_cast<int32_t>(id);
      call = std::move(folded);
      absorbed[backward] = 1;
      return;
    }
  }

  // A bf16 product (its bias folded in or not) widened to f32: the product stores its values
  // as f32 (kMatmul's bf16_as_f32), so the bf16 result is never stored and read back.
  void product_into_widening_cast(std::size_t id) {
    const int32_t product = calls[id].inputs[0];
    const KernelCall& produced = calls[product];
    if (produced.kernel != Kernel::kMatmul || produced.output != product ||
        produced.ints.size() != 2 || program[product].dtype != DType::kBFloat16 ||
        !foldable(product)) {
      return;
    }
    KernelCall folded = produced;
    folded.ints.push_back(1);
    folded.output = static_cast<int32_t>(id);
    calls[id] = std::move(folded);
    absorbed[product] = 1;
  }

  // residual + a bf16 product's values as f32 (a residual connection under autocast): the
  // product adds the residual as it stores its values (kMatmul's residual, the last operand).
  void product_into_residual_add(std::size_t id) {
    KernelCall& call = calls[id];
    for (std::size_t k = 0; k < 2; ++k) {
      const int32_t product = call.inputs[k], residual = call.inputs[1 - k];
      const KernelCall& produced = calls[product];
      if (produced.kernel != Kernel::kMatmul || produced.output != product ||
          produced.ints.size() != 3 || produced.ints[2] != 1 || !foldable(product) ||
          !(program[product].shape == program[id].shape) ||
          !(program[residual].shape == program[id].shape) ||
          program[residual].dtype != DType::kFloat32 || program[residual].op == Op::kConstant) {
        continue;
      }
      KernelCall folded = produced;
      folded.ints.insert(folded.ints.end(), {0, 1});
      folded.inputs.push_back(residual);
      folded.output = static_cast<int32_t>(id);
      call = std::move(folded);
      absorbed[product] = 1;
      return;
    }
  }

  // A bf16 product's operands cast from f32, where every reader of such a cast is a bf16
  // product: the products read the f32 values and round them as they pack them (kMatmul), so
  // the bf16 copy is never stored.
  void narrowing_casts_into_products() {
    const std::size_t n = program.size();
    auto bf16_product = [&](std::size_t id) {
      return !program.is_leaf(id) && root_of[id] < 0 && !absorbed[id] &&
             calls[id].kernel == Kernel::kMatmul && calls[id].ints.size() == 2 &&
             calls[id].inputs.size() >= 2 && program[id].dtype == DType::kBFloat16;
    };
    std::vector<int32_t> product_reads(n, 0);
    for (std::size_t id = 0; id < n; ++id) {
      if (!bf16_product(id)) continue;
      for (std::size_t k = 0; k < 2; ++k) ++product_reads[calls[id].inputs[k]];
    }
    // The casts to fold, found before any is folded; the f32 source must be stored whole.
    std::vector<uint8_t> folds(n, 0);
    for (std::size_t c = 0; c < n; ++c) {
      if (product_reads[c] == 0 || product_reads[c] != uses[c] || program.is_leaf(c) ||
          root_of[c] >= 0 || absorbed[c] || calls[c].kernel != Kernel::kCast ||
          calls[c].inputs.size() != 1 || program[c].dtype != DType::kBFloat16) {
        continue;
      }
      const auto source = static_cast<std::size_t>(calls[c].inputs[0]);
      folds[c] = program[source].dtype == DType::kFloat32 && program[source].op != Op::kConstant &&
                 !absorbed[source] &&
                 (root_of[source] < 0 || root_of[source] == static_cast<int32_t>(source));
    }
    for (std::size_t id = 0; id < n; ++id) {
      if (!bf16_product(id)) continue;
      for (std::size_t k = 0; k < 2; ++k) {
        const int32_t cast = calls[id].inputs[k];
        if (!folds[cast]) continue;
        calls[id].inputs[k] = calls[cast].inputs[0];
        ++uses[calls[cast].inputs[0]];
      }
    }
    for (std::size_t c = 0; c < n; ++c) {
      if (!folds[c]) continue;
      absorbed[c] = 1;
      --uses[calls[c].inputs[0]];  // the cast no longer reads it
    }
  }

  // A node computed by a call of its own that only `readers` read (none of them outputs).
  [[nodiscard]] bool own_call_read_by(int32_t id, int32_t readers) const {
    const auto at = static_cast<std::size_t>(id);
    return uses[at] == readers && !program.is_leaf(at) && root_of[at] < 0 && !absorbed[at];
  }

  // A value [B, H, T, D] as attention reads it: the heads of [B, T, W] in place (an operand's
  // view, executable.h), through the chain that made it: a permute of [B, T, H, D] swapping
  // the middle dims, of a reshape of [B, T, H D], itself a slice of W columns from `offset` or
  // the whole row.
  struct HeadsView {
    int32_t source = -1;
    std::array<int32_t, 3> chain{-1, -1, -1};  // the permute, the reshape, the slice (or -1)
    std::array<int64_t, 6> ints{};             // rows, cols, offset, stride0, stride1, row
  };
  [[nodiscard]] std::optional<HeadsView> heads_view(int32_t permute) const {
    const auto p = static_cast<std::size_t>(permute);
    if (!swaps_middle_dims(program, p) || program.is_leaf(p) || root_of[p] >= 0 || absorbed[p]) {
      return std::nullopt;
    }
    const int32_t reshape = program.operands(p)[0];
    if (program[reshape].op != Op::kReshape || !own_call_read_by(reshape, 1)) return std::nullopt;
    int32_t rows_of = program.operands(reshape)[0];
    const Shape& heads = program[reshape].shape;  // [B, T, H, D]
    const Shape& flat = program[rows_of].shape;
    if (flat.rank() != 3 || flat[0] != heads[0] || flat[1] != heads[1] ||
        flat[2] != heads[2] * heads[3]) {
      return std::nullopt;
    }
    HeadsView view;
    view.chain = {permute, reshape, -1};
    int64_t offset = 0;
    const std::span<const int64_t> slice = program.ints(rows_of);
    if (program[rows_of].op == Op::kSlice && slice.size() == 3 && slice[0] == 2 && slice[2] == 1 &&
        own_call_read_by(rows_of, 1)) {
      view.chain[2] = rows_of;
      offset = slice[1];
      rows_of = program.operands(rows_of)[0];
    }
    const auto source = static_cast<std::size_t>(rows_of);
    // The source is stored whole: an input, a call's result, or a fused kernel's.
    if (program[source].op == Op::kConstant || absorbed[source] ||
        (root_of[source] >= 0 && root_of[source] != rows_of) || program[source].shape.rank() != 3 ||
        program[source].dtype != program[p].dtype) {
      return std::nullopt;
    }
    const int64_t T = heads[1], D = heads[3], W = program[source].shape[2];
    view.source = rows_of;
    view.ints = {T, D, offset, T * W, D, W};
    return view;
  }

  // Attention's q, k, v and the backward's grad read in place from the values their heads were
  // split from, where every reader of the split heads is an attention call (the forward and
  // the backward read the same q, k and v).
  void heads_into_attention() {
    std::vector<int32_t> attention_reads(program.size(), 0);
    auto operands_of = [&](const KernelCall& call) {
      return call.kernel == Kernel::kScaledDotProductAttention ? std::size_t{3} : std::size_t{5};
    };
    auto takes_views = [&](std::size_t id) {
      return !program.is_leaf(id) && root_of[id] < 0 && is_attention(calls[id].kernel) &&
             calls[id].ints.size() == 2 && program[id].shape.rank() == 4 &&
             calls[id].inputs.size() >= operands_of(calls[id]);
    };
    for (std::size_t id = 0; id < program.size(); ++id) {
      if (!takes_views(id)) continue;
      for (std::size_t k = 0; k < operands_of(calls[id]); ++k) {
        if (k != 3) ++attention_reads[calls[id].inputs[k]];
      }
    }
    // Each chain's view, found before any of them is folded.
    std::vector<std::optional<HeadsView>> views(program.size());
    for (std::size_t id = 0; id < program.size(); ++id) {
      if (attention_reads[id] > 0 && attention_reads[id] == uses[id]) {
        views[id] = heads_view(static_cast<int32_t>(id));
      }
    }
    for (std::size_t id = 0; id < program.size(); ++id) {
      if (!takes_views(id)) continue;
      KernelCall& call = calls[id];
      int64_t bits = 0;
      std::vector<int64_t> view_ints;
      for (std::size_t k = 0; k < operands_of(call); ++k) {
        const std::optional<HeadsView>& view = views[call.inputs[k]];
        if (k == 3 || !view) continue;
        call.inputs[k] = view->source;
        bits |= int64_t{1} << (k == 4 ? 3 : k);
        view_ints.insert(view_ints.end(), view->ints.begin(), view->ints.end());
        uses[view->source] += 1;
        for (int32_t folded : view->chain) {
          if (folded >= 0) absorbed[folded] = 1;
        }
      }
      if (bits == 0) continue;
      call.ints.push_back(bits);
      call.ints.insert(call.ints.end(), view_ints.begin(), view_ints.end());
    }
  }

  // The backward's gradients [B, H, L + 2 S, D] sliced into dq, dk and dv, each turned back to
  // [B, T, H D] and concatenated along the last dim (the gradient of a [B, T, 3 H D]
  // projection's split): the backward writes them there (its output view).
  void attention_gradients_into_concat(std::size_t id) {
    const std::span<const int32_t> parts = program.operands(id);
    const std::span<const int64_t> dim = program.ints(id);
    const Shape& out = program[id].shape;
    if (parts.size() != 3 || dim.size() != 1 || dim[0] != 2 || out.rank() != 3) return;
    std::array<int32_t, 9> chain{};
    int32_t backward = -1;
    int64_t row_start = 0, column = 0;
    std::array<int64_t, 12> view{};
    for (std::size_t i = 0; i < 3; ++i) {
      const int32_t reshape = parts[i];
      if (program[reshape].op != Op::kReshape || !own_call_read_by(reshape, 1)) return;
      const int32_t permute = program.operands(reshape)[0];
      if (!swaps_middle_dims(program, permute) || !own_call_read_by(permute, 1)) return;
      const int32_t slice = program.operands(permute)[0];
      const std::span<const int64_t> at = program.ints(slice);
      if (program[slice].op != Op::kSlice || !own_call_read_by(slice, 1) || at.size() != 3 ||
          at[0] != 2 || at[1] != row_start || at[2] != 1) {
        return;
      }
      const int32_t from = program.operands(slice)[0];
      if (i > 0 && from != backward) return;
      backward = from;
      const Shape& heads = program[permute].shape;  // [B, T, H, D]
      view[4 * i] = column;
      view[4 * i + 1] = heads[1] * out[2];
      view[4 * i + 2] = heads[3];
      view[4 * i + 3] = out[2];
      row_start += heads[1];
      column += program[reshape].shape[2];
      chain[3 * i] = reshape;
      chain[3 * i + 1] = permute;
      chain[3 * i + 2] = slice;
    }
    const auto b = static_cast<std::size_t>(backward);
    if (calls[b].kernel != Kernel::kScaledDotProductAttentionBackward ||
        !own_call_read_by(backward, 3) || calls[b].ints.size() < 2 ||
        program[backward].shape[2] != row_start || column != out[2] ||
        program[backward].dtype != program[id].dtype) {
      return;
    }
    // Each gradient fills its rows exactly: E = Ev = D (no padding to drop).
    const std::span<const int32_t> operands = program.operands(b);
    const int64_t D = program[backward].shape[3];
    if (program[operands[0]].shape[3] != D || program[operands[2]].shape[3] != D) return;
    KernelCall folded = calls[b];
    if (folded.ints.size() == 2) folded.ints.push_back(0);
    folded.ints[2] |= kAttentionViewOutput;
    folded.ints.insert(folded.ints.end(), view.begin(), view.end());
    folded.output = static_cast<int32_t>(id);
    calls[id] = std::move(folded);
    absorbed[b] = 1;
    for (int32_t node : chain) absorbed[node] = 1;
  }

  // gelu_backward(product, x) (erf's form), f32 or bf16: the product applies it to each block of
  // its output as it finishes it, so the product's result is never stored and read back.
  void product_into_gelu_backward(std::size_t id) {
    const int32_t product = calls[id].inputs[0], x = calls[id].inputs[1];
    if (plain_product_for(product, id) && program[x].dtype == program[id].dtype &&
        program[x].shape == program[id].shape) {
      product_into(product, id, {0, 1}, x);
    }
  }

  // permute(cast(slice(x))) or permute(slice(x)), the slice the first columns of x's last dim
  // and the cast f32 to bf16 (attention's output rows [O, logsumexp] turned back into [B, T, H,
  // D]): the permute reads x's rows in place and rounds as it copies (kPermute's row).
  void slice_and_cast_into_permute(std::size_t id) {
    KernelCall& call = calls[id];
    const int rank = program[id].shape.rank();
    if (call.inputs.size() != 1 || static_cast<int>(call.ints.size()) != rank || rank == 0) {
      return;
    }
    int32_t slice = call.inputs[0], cast = -1;
    if (program[slice].op == Op::kCast && foldable(slice) && calls[slice].kernel == Kernel::kCast &&
        program[slice].dtype == DType::kBFloat16 &&
        program[program.operands(slice)[0]].dtype == DType::kFloat32) {
      cast = slice;
      slice = program.operands(cast)[0];
    }
    const std::span<const int64_t> at = program.ints(slice);
    if (program[slice].op != Op::kSlice || !foldable(slice) ||
        calls[slice].kernel != Kernel::kSlice || at.size() != 3 || at[0] != rank - 1 ||
        at[1] != 0 || at[2] != 1) {
      return;
    }
    const int32_t source = program.operands(slice)[0];
    const auto stored = static_cast<std::size_t>(source);
    if (program[stored].op == Op::kConstant || absorbed[stored] ||
        (root_of[stored] >= 0 && root_of[stored] != source) ||
        program[stored].shape.rank() != rank) {
      return;
    }
    call.inputs[0] = source;
    call.ints.push_back(program[stored].shape[rank - 1]);
    absorbed[slice] = 1;
    if (cast >= 0) absorbed[cast] = 1;
  }

  // The result of a convolution transposed: the convolution writes it so (layout bit 4).
  void conv_into_transpose(std::size_t id) {
    const int32_t conv = program.operands(id)[0];
    const KernelCall& produced = calls[conv];
    if (program[conv].op != Op::kConv2d || !foldable(conv) || produced.ints.size() < 7 ||
        produced.ints[6] != 1 || produced.inputs.size() != 2) {
      return;
    }
    KernelCall folded = produced;
    if (folded.ints.size() == 7) folded.ints.push_back(0);
    folded.ints[7] |= 4;
    folded.output = static_cast<int32_t>(id);
    calls[id] = std::move(folded);
    absorbed[conv] = 1;
  }
};

}  // namespace

void fold_calls(const Program& program, const std::vector<int32_t>& root_of,
                std::vector<KernelCall>& calls, std::vector<uint8_t>& absorbed) {
  const std::size_t n = program.size();
  absorbed.assign(n, 0);
  Folding folding{{program, root_of, calls, absorbed, std::vector<int32_t>(n, 0), {}}};
  for (std::size_t id = 0; id < n; ++id) {
    for (int32_t operand : program.operands(id)) ++folding.uses[operand];
  }
  for (int32_t output : program.outputs) folding.uses[output] += 2;
  folding.relu_of.assign(n, -1);
  for (std::size_t id = 0; id < n; ++id) {
    if (program[id].op == Op::kRelu)
      folding.relu_of[program.operands(id)[0]] = static_cast<int32_t>(id);
  }
  folding.heads_into_attention();
  folding.narrowing_casts_into_products();
  for (std::size_t id = 0; id < n; ++id) {
    if (program.is_leaf(id) || root_of[id] >= 0 || absorbed[id]) continue;
    const KernelCall& call = calls[id];
    const DType dtype = program[id].dtype;
    if (call.kernel == Kernel::kMaxPool2d && call.ints.size() == 9 && floating(dtype)) {
      relu_into_pool(folding, id);
    } else if (call.kernel == Kernel::kConv2d && call.ints.size() == 7 && call.ints[6] == 1 &&
               call.inputs.size() == 2) {
      folding.swapped_operands_into_conv(id);
    } else if (call.kernel == Kernel::kAdd && call.inputs.size() == 2 && floating(dtype)) {
      // A convolution's bias is f32 or f64 (executable.h); a product's any floating dtype.
      if (dtype != DType::kBFloat16) {
        folding.bias_into(id, Op::kConv2d,
                          [&](const Shape& b) { return folding.per_channel(b, id); });
      }
      if (calls[id].kernel == Kernel::kAdd) {
        folding.bias_into(id, Op::kMatmul,
                          [&](const Shape& b) { return folding.per_column(b, id); });
      }
      // layer_norm_backward folds f32 operands (executable.h).
      if (calls[id].kernel == Kernel::kAdd && dtype == DType::kFloat32) {
        folding.layer_norm_backward_into_add(id);
      }
      if (calls[id].kernel == Kernel::kAdd && dtype == DType::kFloat32) {
        folding.product_into_residual_add(id);
      }
    } else if (call.kernel == Kernel::kLayerNormBackward && call.inputs.size() == 2 &&
               call.ints.size() == 1 && dtype == DType::kFloat32) {
      folding.weight_into_layer_norm_backward(id);
    } else if (call.kernel == Kernel::kCast && call.inputs.size() == 1 &&
               dtype == DType::kFloat32) {
      folding.product_into_widening_cast(id);
    } else if (swaps_first_dims(program, id)) {
      folding.conv_into_transpose(id);
    } else if (call.kernel == Kernel::kPermute) {
      // Not a swap of the first dims: a convolution may take those as its operand's layout,
      // reading the permute's own operand (swapped_operands_into_conv).
      folding.slice_and_cast_into_permute(id);
    } else if (call.kernel == Kernel::kGeluBackward && call.inputs.size() == 2 &&
               (call.ints.empty() || call.ints[0] == 0) &&
               (dtype == DType::kFloat32 || dtype == DType::kBFloat16)) {
      folding.product_into_gelu_backward(id);
    } else if (call.kernel == Kernel::kConcat) {
      folding.attention_gradients_into_concat(id);
    } else if (call.kernel == Kernel::kWhere && call.inputs.size() == 3 &&
               (dtype == DType::kFloat32 || dtype == DType::kBFloat16)) {
      product_into_relu_backward(folding, id);
    }
  }
  // After the loop: relu's backward no longer reads a product's result that a relu reads too.
  for (std::size_t id = 0; id < n; ++id) {
    if (program[id].op == Op::kRelu && root_of[id] < 0 && !absorbed[id]) {
      product_into_relu(folding, id);
    }
  }
}

}  // namespace axle
