// Float constants that LibTorch's code printer would write as int literals
// (jit.h, exact_float_constants).
#include <cmath>
#include <sstream>

#include <torch/csrc/jit/ir/ir.h>

#include "taoquant/jit.h"

namespace tq::jit {

namespace {

// How the archive's code spells `d`: the printer's own formatting (IValue::repr).
std::string printed(double d) {
  std::ostringstream ss;
  c10::IValue(d).repr(ss, [](std::ostream&, const c10::IValue&) { return false; });
  return ss.str();
}

// Whether the code would read `d` back as an int (no point, no exponent,
// not inf or nan): a whole number in [1e10, 1e17) is printed that way.
bool reads_as_int(double d) {
  const std::string s = printed(d);
  return s.find_first_not_of("-0123456789") == std::string::npos;
}

}  // namespace

size_t exact_float_constants(Graph& g) {
  size_t fixed = 0;
  for_each_node(g.block(), [&](Node* n) {
    if (n->kind() != torch::jit::prim::Constant || !n->output()->type()->cast<c10::FloatType>())
      return;
    const double d = torch::jit::toIValue(n->output())->toDouble();
    if (!reads_as_int(d)) return;
    // d = c * k exactly: k a power of two (1024^i < 1e10), c printed with a
    // point (a fraction, or a whole number below 1e10).
    double c = d, k = 1;
    while (reads_as_int(c)) {
      c /= 1024;
      k *= 1024;
    }
    torch::jit::WithInsertPoint guard(n);
    Graph& owner = *n->owningGraph();
    Value* product =
        owner.insert(torch::jit::aten::mul, {owner.insertConstant(c), owner.insertConstant(k)});
    n->output()->replaceAllUsesWith(product);
    n->destroy();
    ++fixed;
  });
  return fixed;
}

size_t exact_float_constants(Module& m) {
  return on_every_method(m, [](Graph& g) { return exact_float_constants(g); });
}

}  // namespace tq::jit
