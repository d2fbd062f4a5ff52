// What the reliability tests of issue 30 share: the crafted data and models
// (tests/cli/reliability_fixtures.py, made once per test process), specs
// for the trained Fashion-MNIST nets, and a tao-quant run in the background
// that a test can signal.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "../torch/plugin_test_util.h"

namespace tqtest {

inline const std::string& fmnist() {
  static const std::string d = std::string(TQ_MODELS_DIR) + "/fmnist";
  return d;
}

// The folder of reliability_fixtures.py's files, made on first use.
inline const std::string& crafted() {
  static const std::string dir = [] {
    const std::string d =
        (fs::temp_directory_path() / ("tq_reliability_fixtures_" + std::to_string(::getpid())))
            .string();
    const auto r =
        run_cmd("/usr/bin/python3 " +
                quote(std::string(TQ_SOURCE_DIR) + "/tests/cli/reliability_fixtures.py") + " " +
                quote(TQ_MODELS_DIR) + " " + quote(d));
    if (r.rc != 0) throw std::runtime_error("reliability_fixtures.py failed:\n" + r.out);
    return d;
  }();
  return dir;
}
inline std::string crafted(const std::string& name) {
  return crafted() + "/" + name;
}

// `tao-quant -q ARGS` (stdout and stderr).
inline CmdResult tao(const std::string& args) {
  return run_cmd(cli() + " -q " + args);
}

inline std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A spec for `model` with `quantize_lines` (indented by two), calibration
// data `calib` (batch 64) and the first 2000 test images (batch 500).
inline std::string fmnist_spec(const TempDir& dir, const std::string& model,
                               const std::string& quantize_lines,
                               const std::string& calib = fmnist() + "/calib.npz",
                               const std::string& extra_dataset = "") {
  return dir.write("spec.yaml",
                   "results_dir: " + (dir.path() / "out").string() +
                       "\nquantize:\n  backend: libtorch\n  model_path: " + model + "\n" +
                       quantize_lines +
                       "dataset:\n  quant_calibration_dataset:\n    data_file: " + calib +
                       "\n    batch_size: 64\n  test_dataset:\n" + "    data_file: " + fmnist() +
                       "/test.npz\n    batch_size: 500\n    max_batches: 4\n" + extra_dataset);
}

// Files under `dir` whose name says they are unfinished (temporary names of
// the atomic writes) or tune's step folder.
inline std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       it != fs::recursive_directory_iterator(); ++it) {
    const std::string name = it->path().filename().string();
    if (name == ".tune" || name.find(".partial") != std::string::npos ||
        name.find(".tmp") != std::string::npos)
      out.push_back(it->path().string());
  }
  return out;
}

// tao-quant ARGS in the background, its output into `log`.
class Background {
 public:
  // The command line is made before fork(): the child only calls
  // async-signal-safe functions until it execs.
  Background(const std::string& args, const std::string& log) {
    const std::string cmd = "exec " + cli() + " -q " + args + " > " + quote(log) + " 2>&1";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::signal(SIGINT, SIG_DFL);  // not the test framework's handlers until exec
      ::signal(SIGTERM, SIG_DFL);
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Background() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  bool running() {
    if (reaped_) return false;
    const pid_t got = ::waitpid(pid_, &status_, WNOHANG);
    if (got == pid_) reaped_ = true;
    return !reaped_;
  }
  // Waits (without a time limit: the test's own limit guards a hang) until
  // tao-quant (the process has exec'd tao-quant-core) catches `sig` (its
  // SigCgt mask in /proc), or has ended.
  bool wait_catches(int sig) {
    while (running()) {
      std::ifstream comm("/proc/" + std::to_string(pid_) + "/comm");
      std::string name;
      std::getline(comm, name);
      std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
      std::string line;
      while (name == "tao-quant-core" && std::getline(in, line))
        if (line.rfind("SigCgt:", 0) == 0) {
          const unsigned long long mask = std::stoull(line.substr(7), nullptr, 16);
          if (mask & (1ull << (sig - 1))) return true;
        }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // Waits until `path` exists, or the process has ended.
  bool wait_file(const fs::path& path) {
    while (running()) {
      if (fs::exists(path)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return fs::exists(path);
  }
  void signal(int sig) { ::kill(pid_, sig); }
  // The exit code, or -N when signal N killed the process (an exit code of
  // 130 is a clean exit after SIGINT).
  int wait() {
    if (!reaped_) ::waitpid(pid_, &status_, 0);
    reaped_ = true;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : -WTERMSIG(status_);
  }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
};

}  // namespace tqtest
