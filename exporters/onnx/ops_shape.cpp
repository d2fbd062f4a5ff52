// Rows for shape ops (reshapes from the profile's shapes, transposes,
// concatenation, splitting, indexing) and dtype casts.
#include <ATen/ATen.h>

#include <numeric>

#include "ops.h"
#include "taoquant/error.h"

namespace tq::onnx_export {

namespace {

// view, reshape, flatten, unflatten, squeeze, unsqueeze...: the result's
// shape is what the profile saw.
void reshape(Converter& c, Node* n) {
  c.bind(n->output(), reshape_to(c, n, in(c, n, 0), c.dims(n->output())));
}

void permute(Converter& c, Node* n) {
  const int64_t r = c.rank(n->input(0));
  std::vector<int64_t> perm = c.ints(n->input(1));
  for (auto& p : perm) p = norm_dim(p, r);
  simple(c, n, "Transpose", 1, {Attr::Ints("perm", perm)});
}

void transpose(Converter& c, Node* n) {
  const int64_t r = c.rank(n->input(0));
  std::vector<int64_t> perm(static_cast<size_t>(r));
  std::iota(perm.begin(), perm.end(), 0);
  if (r >= 2) {
    const int64_t a = n->inputs().size() > 1 ? norm_dim(c.int_of(n->input(1)), r) : 0;
    const int64_t b = n->inputs().size() > 1 ? norm_dim(c.int_of(n->input(2)), r) : 1;
    std::swap(perm[static_cast<size_t>(a)], perm[static_cast<size_t>(b)]);
  }
  simple(c, n, "Transpose", 1, {Attr::Ints("perm", perm)});
}

std::vector<std::string> item_tensors(Converter& c, Node* n, Value* list) {
  std::vector<std::string> out;
  for (const auto& e : c.items(list)) out.push_back(c.tensor_of(e, c.base(n, "item")));
  return out;
}

void cat(Converter& c, Node* n) {
  const int64_t axis = norm_dim(c.int_of(n->input(1)), c.rank(n->output()));
  std::vector<std::string> xs = item_tensors(c, n, n->input(0));
  c.opts.policy->concat_inputs(c, xs);
  c.bind(n->output(), c.b.node1("Concat", xs, c.base(n, "Concat"), {Attr::Int("axis", axis)}));
}

void stack(Converter& c, Node* n) {
  const int64_t axis = norm_dim(c.int_of(n->input(1)), c.rank(n->output()));
  std::vector<std::string> parts;
  for (const auto& x : item_tensors(c, n, n->input(0)))
    parts.push_back(
        c.b.node1("Unsqueeze", {x, c.b.ints(c.base(n, "axes"), {axis})}, c.base(n, "Unsqueeze")));
  c.bind(n->output(), c.b.node1("Concat", parts, c.base(n, "Concat"), {Attr::Int("axis", axis)}));
}

// Split along `axis` into pieces of `sizes`; the node's output is the list.
void split_into(Converter& c, Node* n, int64_t axis, const std::vector<int64_t>& sizes,
                bool squeeze) {
  std::vector<std::string> outs(sizes.size(), c.base(n, "Split"));
  outs = c.b.node("Split", {in(c, n, 0), c.b.ints(c.base(n, "split"), sizes)}, outs,
                  {Attr::Int("axis", axis)});
  std::vector<Bound> items;
  for (auto& o : outs) {
    Bound bd;
    bd.kind = Bound::Kind::kTensor;
    bd.name = squeeze ? c.b.node1("Squeeze", {o, c.b.ints(c.base(n, "axes"), {axis})},
                                  c.base(n, "Squeeze"))
                      : o;
    items.push_back(bd);
  }
  c.bind_seq(n->output(), std::move(items));
}

// chunk(x, chunks, dim): pieces of ceil(D / chunks), the last one smaller.
void chunk(Converter& c, Node* n) {
  const auto& d = c.dims(n->input(0));
  const int64_t axis = norm_dim(c.int_of(n->input(2)), static_cast<int64_t>(d.size()));
  const int64_t size = d[static_cast<size_t>(axis)], chunks = c.int_of(n->input(1));
  if (size < 0) throw RuntimeError("ONNX export: chunk along the batch: " + c.node_where(n));
  const int64_t step = (size + chunks - 1) / chunks;
  std::vector<int64_t> sizes;
  for (int64_t left = size; left > 0; left -= step) sizes.push_back(std::min(step, left));
  split_into(c, n, axis, sizes, false);
}

// split(x, split_size_or_sizes, dim) and unbind(x, dim).
void split(Converter& c, Node* n) {
  const auto& d = c.dims(n->input(0));
  const bool unbind = std::string(n->kind().toUnqualString()) == "unbind";
  const int64_t axis = norm_dim(c.int_of(n->input(unbind ? 1 : 2)), static_cast<int64_t>(d.size()));
  const int64_t size = d[static_cast<size_t>(axis)];
  std::vector<int64_t> sizes;
  if (unbind) {
    sizes.assign(static_cast<size_t>(size), 1);
  } else if (c.constant(n->input(1)).isInt()) {
    const int64_t step = c.int_of(n->input(1));
    for (int64_t left = size; left > 0; left -= step) sizes.push_back(std::min(step, left));
  } else {
    sizes = c.ints(n->input(1));
  }
  split_into(c, n, axis, sizes, unbind);
}

// select(x, dim, index): Gather with a scalar index drops the dimension.
void select(Converter& c, Node* n) {
  const auto& d = c.dims(n->input(0));
  const int64_t axis = norm_dim(c.int_of(n->input(1)), static_cast<int64_t>(d.size()));
  int64_t index = c.int_of(n->input(2));
  if (index < 0) index += d[static_cast<size_t>(axis)];
  const std::string idx = c.b.initializer(c.base(n, "index"), at::scalar_tensor(index, at::kLong));
  c.bind(n->output(),
         c.b.node1("Gather", {in(c, n, 0), idx}, c.base(n, "Gather"), {Attr::Int("axis", axis)}));
}

// slice(x, dim, start, end, step)
void slice(Converter& c, Node* n) {
  const int64_t axis = norm_dim(c.int_of(n->input(1)), c.rank(n->input(0)));
  auto bound = [&](size_t i, int64_t none) {
    if (c.is_none(n->input(i))) return c.b.ints(c.base(n, "slice"), {none});
    return c.int_list(n->input(i));
  };
  c.bind(n->output(), c.b.node1("Slice",
                                {in(c, n, 0), bound(2, 0), bound(3, INT64_MAX),
                                 c.b.ints(c.base(n, "axes"), {axis}), bound(4, 1)},
                                c.base(n, "Slice")));
}

// expand(x, size): torch's -1 keeps a dimension, as a 1 does in ONNX's Expand.
void expand(Converter& c, Node* n) {
  std::string shape;
  if (c.is_constant(n->input(1))) {
    auto s = c.ints(n->input(1));
    for (auto& v : s) v = v < 0 ? 1 : v;
    shape = c.b.ints(c.base(n, "shape"), s);
  } else {
    shape = c.b.node1("Abs", {c.int_list(n->input(1))}, c.base(n, "shape"));  // -1 -> 1
  }
  c.bind(n->output(), c.b.node1("Expand", {in(c, n, 0), shape}, c.base(n, "Expand")));
}

// to(dtype), type_as, float(): a Cast when the dtype changes.
void cast(Converter& c, Node* n) {
  const c10::ScalarType from = c.seen(n->input(0)).dtype, to = c.seen(n->output()).dtype;
  if (from == to) return c.alias(n->output(), n->input(0));
  simple(c, n, "Cast", 1, {Attr::Int("to", static_cast<int64_t>(elem_of(to)))});
}

}  // namespace

void add_shape_ops(OpRows& t) {
  for (const char* k : {"aten::view", "aten::reshape", "aten::flatten", "aten::unflatten",
                        "aten::squeeze", "aten::squeeze_", "aten::unsqueeze", "aten::unsqueeze_",
                        "aten::view_as", "aten::reshape_as"})
    t[k] = reshape;
  t["aten::permute"] = permute;
  for (const char* k : {"aten::transpose", "aten::transpose_", "aten::t", "aten::t_"})
    t[k] = transpose;
  for (const char* k : {"aten::contiguous", "aten::clone", "aten::detach", "aten::detach_"})
    t[k] = [](Converter& c, Node* n) { c.alias(n->output(), n->input(0)); };
  t["aten::cat"] = cat;
  t["aten::concat"] = cat;
  t["aten::stack"] = stack;
  t["aten::chunk"] = chunk;
  t["aten::split"] = split;
  t["aten::split_with_sizes"] = split;
  t["aten::unbind"] = split;
  t["aten::select"] = select;
  t["aten::slice"] = slice;
  t["aten::expand"] = expand;
  for (const char* k : {"aten::to", "aten::type_as", "aten::float"}) t[k] = cast;
}

}  // namespace tq::onnx_export
