// The loader for tensor files: .npz (numpy.savez / savez_compressed), .npy
// and .pt (torch.save). Several input keys or files make a tuple of inputs.
#include <algorithm>
#include <cctype>
#include <filesystem>

#include <spdlog/spdlog.h>
#include <torch/script.h>

#include "data_impl.h"

namespace tq::data {

namespace {

namespace fs = std::filesystem;

std::string lower_ext(const std::string& path) {
  std::string e = fs::path(path).extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

class TensorFileLoader : public DataLoader {
 public:
  TensorFileLoader(const Spec& spec, const DataSourceSpec& src, const std::string& key,
                   bool want_labels)
      : src_(src) {
    const std::vector<std::string> keys =
        src.input_keys.empty() ? std::vector<std::string>{"x"} : src.input_keys;
    const std::string key_hint = key + ".input_key";
    for (size_t fi = 0; fi < src.data_files.size(); ++fi) {
      const std::string& path = src.data_files[fi];
      const std::string file_key = key + ".data_file";
      require_path(spec, file_key, path, false);
      const std::string ext = lower_ext(path);
      if (ext == ".npz") {
        auto ar = open_npz(path);
        for (const auto& k : keys) inputs_.push_back(ar->open(k, key_hint));
        if (want_labels && !labels_ && ar->has(src.label_key))
          labels_ = ar->open(src.label_key, "");
        kinds_.push_back("npz " + path);
      } else if (ext == ".npy") {
        if (!src.input_keys.empty())
          spdlog::debug("{}: input_key does not apply to the .npy file '{}' (one array)", key,
                        path);
        inputs_.push_back(npy_file_source(path));
        kinds_.push_back("npy " + path);
      } else if (ext == ".pt" || ext == ".pth") {
        add_pt(path, keys, key_hint, want_labels);
        kinds_.push_back("pt " + path);
      } else {
        throw RuntimeError("data file '" + path + "' has an unsupported extension '" + ext +
                           "' (expected .npz, .npy or .pt) (" + file_key + " at " +
                           spec.loc(file_key).str() + ")");
      }
    }
    check_sources();
    plan_ = plan_batches(inputs_[0]->rows(), src.batch_size, src.max_batches);
    if (src.shuffle) {
      order_ = seeded_permutation(plan_.total, src.seed);
      order_.resize(static_cast<size_t>(plan_.num_samples));
      for (auto& s : inputs_) s->prepare_random_access();
      if (labels_) labels_->prepare_random_access();
    }
  }

  bool next(Batch& out) override {
    if (cursor_ >= plan_.num_batches) return false;
    const int64_t start = cursor_ * plan_.batch_size;
    const int64_t count = std::min(plan_.batch_size, plan_.num_samples - start);
    std::vector<int64_t> idx;
    if (!order_.empty()) idx.assign(order_.begin() + start, order_.begin() + start + count);
    auto fetch = [&](ArraySource& s) { return idx.empty() ? s.read(start, count) : s.gather(idx); };
    out.inputs.clear();
    for (auto& s : inputs_) out.inputs.push_back(convert_input(fetch(*s), *s));
    out.labels = labels_ ? fetch(*labels_).to(at::kLong).reshape({count}) : at::Tensor();
    out.first_index = static_cast<size_t>(start);
    ++cursor_;
    return true;
  }

  void reset() override {
    cursor_ = 0;
    for (auto& s : inputs_) s->rewind();
    if (labels_) labels_->rewind();
  }
  size_t num_samples() const override { return static_cast<size_t>(plan_.num_samples); }
  size_t num_batches() const override { return static_cast<size_t>(plan_.num_batches); }
  bool has_labels() const override { return labels_ != nullptr; }
  std::string sample_name(size_t position) const override {
    const auto index = position < order_.size() ? order_[position] : static_cast<int64_t>(position);
    return "sample " + std::to_string(index);
  }
  std::string describe() const override {
    std::string s;
    for (const auto& k : kinds_) s += (s.empty() ? "" : " + ") + k;
    s += " (" + std::to_string(plan_.num_samples) + " samples";
    if (plan_.num_samples < plan_.total) s += " of " + std::to_string(plan_.total);
    if (inputs_.size() > 1) s += ", " + std::to_string(inputs_.size()) + " inputs";
    return s + ", batch " + std::to_string(plan_.batch_size) +
           (order_.empty() ? "" : ", shuffled") + ")";
  }

 private:
  void add_pt(const std::string& path, const std::vector<std::string>& keys,
              const std::string& key_hint, bool want_labels) {
    PtContents c = read_pt_file(path);
    std::vector<std::string> names;
    for (const auto& [n, t] : c.named) names.push_back(n);
    auto find = [&](const std::string& k) -> const at::Tensor* {
      for (const auto& [n, t] : c.named)
        if (n == k) return &t;
      return nullptr;
    };
    auto missing = [&](const std::string& k) {
      return RuntimeError(path + ": no " + (c.is_sequence ? "element " : "tensor ") + "'" + k +
                          "'" + did_you_mean(k, names) + "; the file has " +
                          (c.is_sequence ? "elements: " : "keys: ") + join(names) + " (set " +
                          key_hint + ")");
    };
    const at::Tensor* lab = find(src_.label_key);
    if (c.is_sequence && src_.input_keys.empty()) {
      // A tensor or a list/tuple: every element is an input, except the one
      // label_key names by index (label_key: 1 for a saved (x, y)).
      for (const auto& [n, t] : c.named)
        if (!(lab && n == src_.label_key)) inputs_.push_back(tensor_source(t, path + ": " + n));
    } else {
      for (const auto& k : keys) {
        const at::Tensor* t = find(k);
        if (!t) throw missing(k);
        inputs_.push_back(tensor_source(*t, path + ": " + k));
      }
    }
    if (want_labels && lab && !labels_) labels_ = tensor_source(*lab, path + ": " + src_.label_key);
  }

  void check_sources() {
    if (inputs_.empty())
      throw RuntimeError("data files " + join(src_.data_files) + ": no input arrays left");
    const ArraySource& first = *inputs_[0];
    if (first.rows() == 0) throw RuntimeError(first.where() + ": has zero samples");
    for (size_t i = 1; i < inputs_.size(); ++i)
      if (inputs_[i]->rows() != first.rows())
        throw RuntimeError("inputs have different sample counts: '" + first.where() + "' has " +
                           std::to_string(first.rows()) + " but '" + inputs_[i]->where() +
                           "' has " + std::to_string(inputs_[i]->rows()));
    if (labels_) {
      const ArraySource& l = *labels_;
      if (l.type() == ElemType::kFloat32 || l.type() == ElemType::kFloat64)
        throw RuntimeError(l.where() + ": labels are " + elem_name(l.type()) +
                           "; expected integer class indices (int64, int32 or uint8)");
      const auto& s = l.shape();
      if (s.size() > 2 || (s.size() == 2 && s[1] != 1))
        throw RuntimeError(l.where() + ": labels have shape " + shape_str(s) +
                           "; expected [N] class indices");
      if (l.rows() != first.rows())
        throw RuntimeError("'" + l.where() + "' has " + std::to_string(l.rows()) + " labels but '" +
                           first.where() + "' has " + std::to_string(first.rows()) + " samples");
    }
  }

  // float64 -> float32; uint8 -> float32 pixels (scale, mean, std as for
  // images); int32 -> int64; float32 and int64 as stored.
  at::Tensor convert_input(at::Tensor t, const ArraySource& s) const {
    switch (s.type()) {
      case ElemType::kFloat32:
      case ElemType::kInt64:
        return t;
      case ElemType::kFloat64:
        return t.to(at::kFloat);
      case ElemType::kInt32:
        return t.to(at::kLong);
      case ElemType::kUInt8:
        return normalize_pixels(t.to(at::kFloat), s);
    }
    return t;
  }

  at::Tensor normalize_pixels(at::Tensor x, const ArraySource& s) const {
    const auto& p = src_.preprocess;
    x.mul_(p.scale);
    auto per_channel = [&](const std::vector<double>& v, const char* name) -> at::Tensor {
      if (v.size() == 1) return at::full({}, v[0], at::kDouble).to(at::kFloat);
      if (x.dim() < 2 || x.size(1) != static_cast<int64_t>(v.size()))
        throw RuntimeError(s.where() + ": preprocess." + name + " has " + std::to_string(v.size()) +
                           " values but the uint8 array " + shape_str(s.shape()) + " has " +
                           (x.dim() < 2 ? std::string("no channel dimension")
                                        : std::to_string(x.size(1)) + " channels (dim 1)"));
      std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
      shape[1] = static_cast<int64_t>(v.size());
      return at::tensor(c10::ArrayRef<double>(v), at::TensorOptions().dtype(at::kDouble))
          .to(at::kFloat)
          .view(shape);
    };
    if (!p.mean.empty()) x.sub_(per_channel(p.mean, "mean"));
    if (!p.std.empty()) x.div_(per_channel(p.std, "std"));
    return x;
  }

  DataSourceSpec src_;
  std::vector<std::unique_ptr<ArraySource>> inputs_;
  std::unique_ptr<ArraySource> labels_;
  std::vector<std::string> kinds_;
  BatchPlan plan_;
  std::vector<int64_t> order_;
  int64_t cursor_ = 0;
};

}  // namespace

std::unique_ptr<DataLoader> make_tensor_loader(const Spec& spec, const DataSourceSpec& src,
                                               const std::string& key, bool want_labels) {
  return std::make_unique<TensorFileLoader>(spec, src, key, want_labels);
}

}  // namespace tq::data
