// .npz archives (libzip). Members stored uncompressed (numpy.savez) are read
// by seeking to the rows a batch needs; compressed members
// (numpy.savez_compressed) are streamed forward, and decompressed into memory
// once only when shuffled reading needs random access.
#include <zip.h>

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>
#include <torch/script.h>

#include "data_impl.h"

namespace tq::data {

namespace {

constexpr const char* kSuffix = ".npy";

std::string zip_message(int code) {
  zip_error_t err;
  zip_error_init_with_code(&err, code);
  std::string s = zip_error_strerror(&err);
  zip_error_fini(&err);
  return s;
}

class NpzMemberSource : public ArraySource {
 public:
  NpzMemberSource(std::shared_ptr<NpzArchive> ar, zip_uint64_t index, const std::string& where)
      : ar_(std::move(ar)), index_(index) {
    where_ = where;
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(za(), index_, 0, &st) != 0) fail("cannot stat the member");
    member_size_ = st.size;
    seekable_ = (st.valid & ZIP_STAT_COMP_METHOD) && st.comp_method == ZIP_CM_STORE &&
                !((st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE);
    open_file();
    try {  // a bad header throws here, where no destructor would close the member
      auto hdr = read_npy_header([this](char* b, size_t n) { return raw_read(b, n); }, where_);
      type_ = hdr.type;
      shape_ = hdr.shape;
      offset_ = hdr.data_offset;
      pos_ = 0;
      check_npy_size(hdr, member_size_, where_);
    } catch (...) {
      close_file();
      throw;
    }
  }
  ~NpzMemberSource() override { close_file(); }

  at::Tensor read(int64_t start, int64_t count) override {
    if (mem_.defined()) return mem_.narrow(0, start, count).clone();
    std::vector<int64_t> sizes = shape_;
    sizes[0] = count;
    at::Tensor out = at::empty(sizes, at::TensorOptions().dtype(scalar_type(type_)));
    const uint64_t target = row_bytes() * static_cast<uint64_t>(start);
    const size_t nbytes = row_bytes() * static_cast<size_t>(count);
    if (seekable_) {
      if (zip_fseek(file_, static_cast<zip_int64_t>(offset_ + target), SEEK_SET) != 0)
        fail("seek to row " + std::to_string(start) + " failed");
    } else {
      if (target < pos_) {  // forward-only: start over
        close_file();
        open_file();
        skip(offset_);
        pos_ = 0;
      }
      skip(target - pos_);
      pos_ = target + nbytes;
    }
    if (raw_read(static_cast<char*>(out.data_ptr()), nbytes) != nbytes)
      fail("unexpected end of data at row " + std::to_string(start));
    return out;
  }

  void prepare_random_access() override {
    if (seekable_ || mem_.defined()) return;
    spdlog::debug(
        "{}: compressed npz member, decompressing {} rows into memory for shuffled reading", where_,
        rows());
    at::Tensor all = read(0, rows());
    mem_ = all;
    close_file();
  }

  void rewind() override {}

 private:
  zip_t* za() const { return static_cast<zip_t*>(ar_->handle()); }
  [[noreturn]] void fail(const std::string& what) const {
    std::string detail = file_ ? zip_error_strerror(zip_file_get_error(file_)) : zip_strerror(za());
    throw RuntimeError(where_ + ": " + what + " (" + detail + ")");
  }
  void open_file() {
    file_ = zip_fopen_index(za(), index_, 0);
    if (!file_) fail("cannot open the member");
  }
  void close_file() {
    if (file_) zip_fclose(file_);
    file_ = nullptr;
  }
  size_t raw_read(char* buf, size_t n) {
    size_t done = 0;
    while (done < n) {
      zip_int64_t got = zip_fread(file_, buf + done, n - done);
      if (got < 0) fail("read failed");
      if (got == 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }
  void skip(uint64_t n) {
    std::vector<char> scratch(std::min<uint64_t>(n, 1 << 20));
    while (n > 0) {
      size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, scratch.size()));
      if (raw_read(scratch.data(), chunk) != chunk) fail("unexpected end of data");
      n -= chunk;
    }
  }

  std::shared_ptr<NpzArchive> ar_;
  zip_uint64_t index_;
  zip_file_t* file_ = nullptr;
  uint64_t member_size_ = 0;
  uint64_t offset_ = 0;
  uint64_t pos_ = 0;  // forward reading: data bytes consumed
  bool seekable_ = false;
  at::Tensor mem_;
};

}  // namespace

NpzArchive::NpzArchive(const std::string& path) : path_(path) {
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY, &err);
  if (!z)
    throw RuntimeError("cannot open '" + path + "' as an .npz (zip) archive: " + zip_message(err));
  zip_ = z;
  zip_int64_t n = zip_get_num_entries(z, 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    const char* name = zip_get_name(z, static_cast<zip_uint64_t>(i), 0);
    if (!name) continue;
    std::string s = name;
    if (s.size() > 4 && s.compare(s.size() - 4, 4, kSuffix) == 0)
      keys_.push_back(s.substr(0, s.size() - 4));
  }
}

NpzArchive::~NpzArchive() {
  if (zip_) zip_discard(static_cast<zip_t*>(zip_));
}

std::vector<std::string> NpzArchive::keys() const {
  return keys_;
}

bool NpzArchive::has(const std::string& key) const {
  return std::find(keys_.begin(), keys_.end(), key) != keys_.end();
}

std::unique_ptr<ArraySource> NpzArchive::open(const std::string& key, const std::string& spec_key) {
  if (!has(key)) {
    std::string list;
    for (const auto& k : keys_) list += (list.empty() ? "" : ", ") + k;
    throw RuntimeError(path_ + ": no array '" + key + "'" + did_you_mean(key, keys_) +
                       "; the file has " +
                       (keys_.empty() ? std::string("no arrays") : "keys: " + list) +
                       (spec_key.empty() ? "" : " (set " + spec_key + ")"));
  }
  zip_int64_t idx = zip_name_locate(static_cast<zip_t*>(zip_), (key + kSuffix).c_str(), 0);
  if (idx < 0) throw RuntimeError(path_ + ": cannot locate member '" + key + kSuffix + "'");
  return std::make_unique<NpzMemberSource>(shared_from_this(), static_cast<zip_uint64_t>(idx),
                                           path_ + ": " + key);
}

std::shared_ptr<NpzArchive> open_npz(const std::string& path) {
  return std::make_shared<NpzArchive>(path);
}

}  // namespace tq::data
