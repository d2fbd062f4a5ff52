// NPY headers, array sources (.npy files, tensors in memory) and the helpers
// the loaders share.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include <torch/script.h>

#include "core/messages.h"
#include "data_impl.h"

namespace tq::data {

namespace fs = std::filesystem;

namespace {

// Each element type and the tensor dtype that holds it.
constexpr std::pair<ElemType, at::ScalarType> kScalarTypes[] = {{ElemType::kFloat32, at::kFloat},
                                                                {ElemType::kFloat64, at::kDouble},
                                                                {ElemType::kUInt8, at::kByte},
                                                                {ElemType::kInt32, at::kInt},
                                                                {ElemType::kInt64, at::kLong}};

}  // namespace

at::ScalarType scalar_type(ElemType t) {
  for (const auto& [elem, scalar] : kScalarTypes)
    if (elem == t) return scalar;
  return at::kFloat;
}

size_t ArraySource::row_bytes() const {
  size_t n = elem_size(type_);
  for (size_t i = 1; i < shape_.size(); ++i) n *= static_cast<size_t>(shape_[i]);
  return n;
}

at::Tensor ArraySource::gather(const std::vector<int64_t>& idx) {
  std::vector<int64_t> sizes = shape_;
  sizes[0] = static_cast<int64_t>(idx.size());
  at::Tensor out = at::empty(sizes, at::TensorOptions().dtype(scalar_type(type_)));
  size_t i = 0;
  while (i < idx.size()) {
    size_t j = i + 1;
    while (j < idx.size() && idx[j] == idx[j - 1] + 1) ++j;
    int64_t n = static_cast<int64_t>(j - i);
    out.narrow(0, static_cast<int64_t>(i), n).copy_(read(idx[i], n));
    i = j;
  }
  return out;
}

namespace {

class TensorSource : public ArraySource {
 public:
  TensorSource(at::Tensor t, const std::string& where) {
    where_ = where;
    if (t.dim() == 0)
      throw RuntimeError(where +
                         ": is a scalar; expected a tensor with one row per sample ([N, ...])");
    const auto* held = std::find_if(std::begin(kScalarTypes), std::end(kScalarTypes),
                                    [&](const auto& e) { return e.second == t.scalar_type(); });
    if (held == std::end(kScalarTypes))
      throw RuntimeError(where + ": unsupported dtype " +
                         std::string(c10::toString(t.scalar_type())) +
                         "; supported: " + supported_elems());
    type_ = held->first;
    t_ = t.contiguous();
    shape_ = t_.sizes().vec();
  }
  at::Tensor read(int64_t start, int64_t count) override {
    return t_.narrow(0, start, count).clone();
  }
  at::Tensor gather(const std::vector<int64_t>& idx) override {
    return t_.index_select(
        0, at::tensor(c10::ArrayRef<int64_t>(idx), at::TensorOptions().dtype(at::kLong)));
  }

 private:
  at::Tensor t_;
};

class NpyFileSource : public ArraySource {
 public:
  explicit NpyFileSource(const std::string& path) : path_(path) {
    where_ = path;
    f_ = std::fopen(path.c_str(), "rb");
    if (!f_) throw RuntimeError("cannot open '" + path + "': " + std::strerror(errno));
    auto hdr =
        read_npy_header([this](char* b, size_t n) { return std::fread(b, 1, n, f_); }, where_);
    type_ = hdr.type;
    shape_ = hdr.shape;
    offset_ = hdr.data_offset;
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) throw RuntimeError(path + ": cannot read the file size: " + ec.message());
    check_npy_size(hdr, size, path);
  }
  ~NpyFileSource() override {
    if (f_) std::fclose(f_);
  }
  at::Tensor read(int64_t start, int64_t count) override {
    std::vector<int64_t> sizes = shape_;
    sizes[0] = count;
    at::Tensor out = at::empty(sizes, at::TensorOptions().dtype(scalar_type(type_)));
    size_t nbytes = row_bytes() * static_cast<size_t>(count);
    if (fseeko(f_, static_cast<off_t>(offset_ + row_bytes() * static_cast<size_t>(start)),
               SEEK_SET) != 0 ||
        std::fread(out.data_ptr(), 1, nbytes, f_) != nbytes)
      throw RuntimeError(path_ + ": read failed at row " + std::to_string(start) + ": " +
                         (std::ferror(f_) ? std::strerror(errno) : "unexpected end of file"));
    return out;
  }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  size_t offset_ = 0;
};

}  // namespace

std::unique_ptr<ArraySource> tensor_source(at::Tensor t, const std::string& where) {
  return std::make_unique<TensorSource>(std::move(t), where);
}

std::unique_ptr<ArraySource> npy_file_source(const std::string& path) {
  return std::make_unique<NpyFileSource>(path);
}

void require_path(const Spec& spec, const std::string& key, const std::string& path, bool dir) {
  std::error_code ec;
  std::string from = " (" + key + " at " + spec.loc(key).str() + ")";
  const std::string problem = path_problem(path);
  if (!problem.empty())
    throw RuntimeError((dir ? "folder " : "data file ") + quote_value(path) + " " + problem + from);
  if (dir && !fs::is_directory(path, ec))
    throw RuntimeError("'" + path + "' is not a folder" + from);
  if (!dir && fs::is_directory(path, ec))
    throw RuntimeError("'" + path + "' is a folder, expected a .npz/.npy/.pt file" + from);
  // A FIFO or a device is never read: it could block, or never end.
  if (const std::string kind = dir ? "" : file_problem(path); !kind.empty())
    throw RuntimeError("data file " + quote_value(path) + " " + kind + from);
}

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  std::mt19937_64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    // Unbiased draw in [0, i] by rejection (std::uniform_int_distribution is
    // implementation-defined, this is not).
    const uint64_t range = static_cast<uint64_t>(i) + 1;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
    uint64_t r;
    do r = rng();
    while (r >= limit);
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(r % range)]);
  }
  return p;
}

BatchPlan plan_batches(int64_t total, int batch_size, int max_batches) {
  BatchPlan b;
  b.total = total;
  b.batch_size = std::max(1, batch_size);
  b.num_batches = (total + b.batch_size - 1) / b.batch_size;
  if (max_batches > 0) b.num_batches = std::min<int64_t>(b.num_batches, max_batches);
  b.num_samples = std::min(total, b.num_batches * b.batch_size);
  return b;
}

std::string shape_str(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace tq::data
