// graph/passes: canonicalisation — commutative operand order, reshape and permute chains,
// transposes folded into matmuls, and sums of zero-padded pieces made one concatenation.
#include <algorithm>
#include <array>
#include <vector>

#include "axle/graph/passes/passes.h"

namespace axle {
namespace {

bool is_identity(std::span<const int64_t> permutation) {
  for (std::size_t i = 0; i < permutation.size(); ++i) {
    if (permutation[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// A permutation that swaps the last two dims and keeps the others in place: what matmul can
// absorb as a transpose flag.
bool swaps_last_two(std::span<const int64_t> permutation) {
  const std::size_t rank = permutation.size();
  if (rank < 2) return false;
  for (std::size_t i = 0; i + 2 < rank; ++i) {
    if (permutation[i] != static_cast<int64_t>(i)) return false;
  }
  return permutation[rank - 2] == static_cast<int64_t>(rank - 1) &&
         permutation[rank - 1] == static_cast<int64_t>(rank - 2);
}

class Canonicalizer {
 public:
  explicit Canonicalizer(const Program& in) : in_(in), renamed_(in.size(), -1) {
    out_.reserve(in.size());
  }

  Program run() {
    for (std::size_t id = 0; id < in_.size(); ++id) {
      renamed_[id] = rewrite(static_cast<int32_t>(id));
    }
    for (int32_t output : in_.outputs) out_.outputs.push_back(renamed_[output]);
    out_.num_inputs = in_.num_inputs;
    return std::move(out_);
  }

 private:
  int32_t rewrite(int32_t id) {
    const Program::Instr& instr = in_[id];
    switch (instr.op) {
      case Op::kReshape:
        return reshape(id);
      case Op::kPermute:
        return permute(id);
      case Op::kMatmul:
        return matmul(id);
      case Op::kAdd:
        if (const int32_t merged = disjoint_concats(id); merged >= 0) return merged;
        break;
      default:
        break;
    }
    if (is_commutative(instr.op) && in_.operands(id).size() == 2) {
      std::array<int32_t, 2> operands = {renamed_[in_.operands(id)[0]],
                                         renamed_[in_.operands(id)[1]]};
      std::ranges::sort(operands);
      return out_.append(instr.op, instr.dtype, instr.shape, operands, in_.ints(id), in_.reals(id));
    }
    return out_.append_renamed(in_, id, renamed_);
  }

  // reshape(reshape(x)) is reshape(x); a reshape to x's own shape is x.
  int32_t reshape(int32_t id) {
    int32_t source = renamed_[in_.operands(id)[0]];
    while (out_[source].op == Op::kReshape) source = out_.operands(source)[0];
    const Program::Instr& instr = in_[id];
    if (out_[source].shape == instr.shape && out_[source].dtype == instr.dtype) return source;
    const std::array<int32_t, 1> operand = {source};
    return out_.append(Op::kReshape, instr.dtype, instr.shape, operand);
  }

  // permute(permute(x, inner), outer) is permute(x, inner[outer[i]]); an identity is x.
  int32_t permute(int32_t id) {
    int32_t source = renamed_[in_.operands(id)[0]];
    std::vector<int64_t> permutation(in_.ints(id).begin(), in_.ints(id).end());
    if (out_[source].op == Op::kPermute) {
      const std::span<const int64_t> inner = out_.ints(source);
      for (int64_t& dim : permutation) dim = inner[dim];
      source = out_.operands(source)[0];
    }
    if (is_identity(permutation)) return source;
    const std::array<int32_t, 1> operand = {source};
    return out_.append(Op::kPermute, in_[id].dtype, in_[id].shape, operand, permutation);
  }

  // matmul(transpose(a), b) is matmul(a, b) with a's transpose flag flipped (and likewise b).
  int32_t matmul(int32_t id) {
    std::array<int32_t, 2> operands = {renamed_[in_.operands(id)[0]],
                                       renamed_[in_.operands(id)[1]]};
    std::array<int64_t, 2> transposed = {in_.ints(id)[0], in_.ints(id)[1]};
    for (std::size_t k = 0; k < 2; ++k) {
      const int32_t operand = operands[k];
      if (out_[operand].op == Op::kPermute && swaps_last_two(out_.ints(operand))) {
        operands[k] = out_.operands(operand)[0];
        transposed[k] ^= 1;
      }
    }
    return out_.append(Op::kMatmul, in_[id].dtype, in_[id].shape, operands, transposed,
                       in_.reals(id));
  }

  // add(concat(...), concat(...)) along one dim, where no piece that is not zeros overlaps one of
  // the other side's (the gradients of a split's pieces, each padded back into place, summed): the
  // pieces in one concat, zero blocks between them. -1 for any other add.
  int32_t disjoint_concats(int32_t id) {
    const Program::Instr& instr = in_[id];
    if (in_.operands(id).size() != 2) return -1;
    const std::array<int32_t, 2> sides = {renamed_[in_.operands(id)[0]],
                                          renamed_[in_.operands(id)[1]]};
    for (int32_t side : sides) {
      if (out_[side].op != Op::kConcat || !(out_[side].shape == instr.shape) ||
          out_[side].dtype != instr.dtype) {
        return -1;
      }
    }
    const int64_t dim = out_.ints(sides[0])[0];
    if (out_.ints(sides[1])[0] != dim) return -1;
    struct Piece {
      int64_t start, length;
      int32_t id;
    };
    std::vector<Piece> pieces;  // both sides' pieces that are not zeros
    for (int32_t side : sides) {
      int64_t start = 0;
      for (int32_t piece : out_.operands(side)) {
        const int64_t length = out_[piece].shape[static_cast<int>(dim)];
        if (!out_.is_zero(piece)) pieces.push_back({start, length, piece});
        start += length;
      }
    }
    std::ranges::sort(pieces, {}, &Piece::start);
    for (std::size_t i = 1; i < pieces.size(); ++i) {
      if (pieces[i].start < pieces[i - 1].start + pieces[i - 1].length) return -1;
    }
    auto zeros = [&](int64_t length) {
      Shape shape = instr.shape;
      shape[static_cast<int>(dim)] = length;
      const std::array<int32_t, 1> zero = {out_.append_constant(instr.dtype, Shape{}, 0.0)};
      return out_.append(Op::kExpand, instr.dtype, shape, zero);
    };
    std::vector<int32_t> operands;
    int64_t at = 0;
    for (const Piece& piece : pieces) {
      if (piece.start > at) operands.push_back(zeros(piece.start - at));
      operands.push_back(piece.id);
      at = piece.start + piece.length;
    }
    if (at < instr.shape[static_cast<int>(dim)]) {
      operands.push_back(zeros(instr.shape[static_cast<int>(dim)] - at));
    }
    if (operands.size() == 1) return operands[0];
    return out_.append(Op::kConcat, instr.dtype, instr.shape, operands, out_.ints(sides[0]));
  }

  const Program& in_;
  Program out_;
  std::vector<int32_t> renamed_;
};

}  // namespace

bool is_commutative(Op op) noexcept {
  return op == Op::kAdd || op == Op::kMul || op == Op::kEq || op == Op::kNe ||
         op == Op::kLogicalAnd || op == Op::kLogicalOr;
}

Program canonicalize(const Program& program) { return Canonicalizer(program).run(); }

}  // namespace axle
