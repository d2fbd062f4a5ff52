// XXH64: the content hash of job inputs (batch), artifacts (result pairs),
// timing-cache keys and graphs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tq {

// XXH64 (seed 0 by default): a fast 64-bit non-cryptographic hash, used to
// tell whether a job's inputs changed since its results were written.
class Hash64 {
 public:
  explicit Hash64(uint64_t seed = 0);
  Hash64& update(const void* data, size_t len);
  Hash64& update(const std::string& s) { return update(s.data(), s.size()); }
  uint64_t digest() const;
  std::string hex() const;  // 16 lowercase hex digits

 private:
  uint64_t v_[4];
  uint64_t total_ = 0;
  unsigned char buf_[32];
  size_t buf_len_ = 0;
  uint64_t seed_;
};

// Content hash of a regular file; throws RuntimeError if it cannot be read.
std::string hash_file(const std::string& path);

}  // namespace tq
