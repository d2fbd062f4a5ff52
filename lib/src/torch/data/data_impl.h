// Internals of the data loaders: array sources (.npy, .npz members, .pt
// tensors), the NPY header, and helpers shared by the tensor and image
// loaders. Not installed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/npy.h"
#include "taoquant/data.h"
#include "taoquant/spec.h"

namespace tq::data {

at::ScalarType scalar_type(ElemType t);

// One array, read by rows (the first dimension is the sample axis).
class ArraySource {
 public:
  virtual ~ArraySource() = default;
  const std::string& where() const { return where_; }  // "calib.npz: x"
  ElemType type() const { return type_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t rows() const { return shape_.empty() ? 0 : shape_[0]; }
  size_t row_bytes() const;
  // Rows [start, start+count) as a tensor [count, shape[1:]...] of the
  // source's element type.
  virtual at::Tensor read(int64_t start, int64_t count) = 0;
  // Rows in the given order; the default reads runs of consecutive indices.
  virtual at::Tensor gather(const std::vector<int64_t>& rows);
  // Makes random access cheap (a compressed npz member is decompressed into
  // memory once); called before shuffled reading.
  virtual void prepare_random_access() {}
  // Back to the start (forward-only readers reopen).
  virtual void rewind() {}

 protected:
  std::string where_;
  ElemType type_ = ElemType::kFloat32;
  std::vector<int64_t> shape_;
};

// A tensor in memory (from a .pt file or a materialized member).
std::unique_ptr<ArraySource> tensor_source(at::Tensor t, const std::string& where);
// A .npy file on disk, read by seeking.
std::unique_ptr<ArraySource> npy_file_source(const std::string& path);

// An open .npz (zip) archive; arrays are opened by key ("x" = member "x.npy").
class NpzArchive : public std::enable_shared_from_this<NpzArchive> {
 public:
  // Use open_npz (sources keep the archive alive).
  explicit NpzArchive(const std::string& path);
  ~NpzArchive();
  NpzArchive(const NpzArchive&) = delete;
  NpzArchive& operator=(const NpzArchive&) = delete;
  const std::string& path() const { return path_; }
  std::vector<std::string> keys() const;  // member names without ".npy", in archive order
  bool has(const std::string& key) const;
  // Throws RuntimeError listing the keys present when `key` is absent.
  std::unique_ptr<ArraySource> open(const std::string& key, const std::string& spec_key);
  void* handle() const { return zip_; }

 private:
  std::string path_;
  void* zip_ = nullptr;  // zip_t*
  std::vector<std::string> keys_;
};

std::shared_ptr<NpzArchive> open_npz(const std::string& path);

// The contents of a .pt file written by torch.save: a tensor, a list/tuple
// of tensors, or a dict of tensors.
struct PtContents {
  std::string path;
  std::vector<std::pair<std::string, at::Tensor>>
      named;                 // dict entries, or "0", "1", ... for sequences
  bool is_sequence = false;  // a tensor, list or tuple
};
PtContents read_pt_file(const std::string& path);

// Checks a data file or folder exists; RuntimeError naming the spec key.
void require_path(const Spec& spec, const std::string& key, const std::string& path, bool dir);

// The seeded shuffle: a Fisher-Yates permutation driven by mt19937_64(seed),
// the same on every platform.
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed);

// Batches and samples after max_batches.
struct BatchPlan {
  int64_t total = 0;  // samples in the data
  int64_t batch_size = 1;
  int64_t num_batches = 0;
  int64_t num_samples = 0;  // after max_batches
};
BatchPlan plan_batches(int64_t total, int batch_size, int max_batches);

// "[1,3,32,32]"
std::string shape_str(at::IntArrayRef s);

// The image-folder loader (image_loader.cpp) and the tensor-file loader
// (tensor_loader.cpp).
std::unique_ptr<DataLoader> make_image_loader(const Spec& spec, const DataSourceSpec& src,
                                              const std::string& key, bool want_labels);
std::unique_ptr<DataLoader> make_tensor_loader(const Spec& spec, const DataSourceSpec& src,
                                               const std::string& key, bool want_labels);

}  // namespace tq::data
