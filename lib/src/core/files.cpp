// Reading a file a user hands over (a timing cache, a report): only a
// regular file, and only up to a size that kind of file can have.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/messages.h"

namespace tq {

namespace {

// "is a FIFO (named pipe), not a regular file", ... for what `mode` is.
std::string kind_problem(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "is a folder, not a file";
  const char* kind = S_ISFIFO(mode)   ? "a FIFO (named pipe)"
                     : S_ISCHR(mode)  ? "a character device"
                     : S_ISBLK(mode)  ? "a block device"
                     : S_ISSOCK(mode) ? "a socket"
                                      : "not a file";
  return std::string("is ") + kind + ", not a regular file";
}

// "64 MiB", or "999 bytes" for a size that is not a whole number of MiB.
std::string size_text(size_t bytes) {
  constexpr size_t kMiB = size_t{1} << 20;
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  return std::to_string(bytes) + " bytes";
}

}  // namespace

std::string file_problem(const std::string& path) {
  const std::string missing = path_problem(path);
  if (!missing.empty()) return missing;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::string("cannot be read: ") + std::strerror(errno);
  return kind_problem(st.st_mode);
}

std::string read_file_capped(const std::string& path, size_t max_bytes, const std::string& what,
                             std::string& text) {
  const std::string missing = path_problem(path);
  if (!missing.empty()) return missing;
  // O_NONBLOCK: opening a FIFO does not wait for a writer; fstat then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::string("cannot be read: ") + std::strerror(errno);
  struct stat st {};
  std::string problem = ::fstat(fd, &st) != 0
                            ? std::string("cannot be read: ") + std::strerror(errno)
                            : kind_problem(st.st_mode);
  const auto too_big = [&](size_t n) {
    return "is " + std::to_string(n) + " bytes, more than the " + size_text(max_bytes) + " a " +
           what + " may have";
  };
  if (problem.empty() && static_cast<size_t>(st.st_size) > max_bytes)
    problem = too_big(static_cast<size_t>(st.st_size));
  text.clear();
  char buf[1 << 16];
  while (problem.empty()) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) problem = std::string("cannot be read: ") + std::strerror(errno);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > max_bytes) problem = too_big(text.size());  // it grew while read
  }
  ::close(fd);
  if (!problem.empty()) text.clear();
  return problem;
}

}  // namespace tq
