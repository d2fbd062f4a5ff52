// Error types and the documented exit codes.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "taoquant/strings.h"

namespace tq {

// Documented in README.md and `tao-quant --help`.
enum class ExitCode : int {
  kOk = 0,
  kRuntime = 1,  // model, data, backend or I/O failure
  kUsage = 2,    // bad spec, bad override, bad command line
  kGate = 3,     // a quality gate failed (evaluate, batch)
  // 128 + the signal: SIGINT or SIGTERM ended quantize, tune, profile or
  // batch at a safe point (taoquant/interrupt.h).
  kSigInt = 130,
  kSigTerm = 143,
};

// Where a value came from: a spec file position or a command-line override.
struct SourceLoc {
  std::string file;         // spec path, or "<override N>" for key=value arguments
  int line = 0;             // 1-based; 0 = unknown
  int column = 0;           // 1-based; 0 = unknown
  std::string str() const;  // "file:line:col" (parts that are known)
};

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

// A spec or usage problem: exit code 2. The message is prefixed with the
// location ("spec.yaml:12:5: ") when one is known.
class SpecError : public Error {
 public:
  SpecError(const SourceLoc& loc, const std::string& msg);
  const SourceLoc& loc() const { return loc_; }
  const std::string& bare_message() const { return bare_; }

 private:
  SourceLoc loc_;
  std::string bare_;
};

class UsageError : public Error {
 public:
  explicit UsageError(const std::string& msg) : Error(ExitCode::kUsage, msg) {}
};

// Model, data, backend or I/O failure: exit code 1.
class RuntimeError : public Error {
 public:
  explicit RuntimeError(const std::string& msg) : Error(ExitCode::kRuntime, msg) {}
};

// " (did you mean 'x'?)" or "" when nothing is close enough.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);
// Levenshtein edit distance.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace tq
