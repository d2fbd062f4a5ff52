// Test helpers: a throwaway one-node Slurm cluster (scripts/slurm/cluster.sh)
// owned by the test, shell commands against it, its jobs' states, and the
// processes the test watches through /proc.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../torch/plugin_test_util.h"

namespace tqslurm {

namespace fs = std::filesystem;

using Result = tqtest::CmdResult;
using tqtest::quote;

// `bash -c command`: its exit code (-1 when it did not exit) and output.
inline Result shell(const std::string& command) {
  return tqtest::run_cmd("bash -c " + quote(command));
}

inline const std::string& cluster_script() {
  static const std::string s = std::string(TQ_SOURCE_DIR) + "/scripts/slurm/cluster.sh";
  return s;
}

// Why no cluster can start here (not root, Slurm not installed, no network
// namespaces), or nothing when one can.
inline std::optional<std::string> cannot_start() {
  const Result r = shell("bash " + quote(cluster_script()) + " check");
  if (r.rc == 0) return std::nullopt;
  return r.out.empty() ? "cluster.sh check exited with " + std::to_string(r.rc) : r.out;
}

// Whether `pid` is a live process (a zombie that waits for init to reap it
// is not).
inline bool alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

// The live processes (never this one) whose arguments satisfy `match`.
inline std::vector<pid_t> processes_where(
    const std::function<bool(const std::vector<std::string>&)>& match) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    std::vector<std::string> args;
    for (std::string a; std::getline(in, a, '\0');) args.push_back(a);
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (!args.empty() && pid != ::getpid() && match(args) && alive(pid)) out.push_back(pid);
  }
  return out;
}

inline bool has_arg(const std::vector<std::string>& args, const std::string& a) {
  for (const auto& x : args)
    if (x == a) return true;
  return false;
}

// tao-quant's own processes (the launcher execs tao-quant-core): not srun.
inline bool is_tao_quant(const std::vector<std::string>& args) {
  return fs::path(args[0]).filename().string().rfind("tao-quant", 0) == 0;
}

// The number of CPUs a process may run on (/proc/PID/status Cpus_allowed_list).
inline int allowed_cpus(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Cpus_allowed_list:", 0) != 0) continue;
    std::istringstream list(line.substr(line.find(':') + 1));
    for (std::string range; std::getline(list, range, ',');) {
      int a = 0, b = -1;
      if (std::sscanf(range.c_str(), "%d-%d", &a, &b) == 2)
        n += b - a + 1;
      else if (std::sscanf(range.c_str(), "%d", &a) == 1)
        n += 1;
    }
  }
  return n;
}

// Polls `done` every `period_ms` until it holds or `limit_s` pass (a guard
// against a hang, not a measurement); whether it held.
inline bool wait_until(const std::function<bool()>& done, int limit_s, int period_ms = 100) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(limit_s);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(period_ms));
  }
  return true;
}

// One job record of `scontrol show job -o` (an array task, or the pending
// rest of an array).
struct SlurmJob {
  std::map<std::string, std::string> fields;  // JobId, ArrayTaskId, JobState, ExitCode, ...
  std::string get(const std::string& key) const {
    auto it = fields.find(key);
    return it == fields.end() ? "" : it->second;
  }
  bool finished() const {
    const std::string s = get("JobState");
    return s == "COMPLETED" || s == "FAILED" || s == "CANCELLED" || s == "TIMEOUT" ||
           s == "NODE_FAIL" || s == "OUT_OF_MEMORY" || s == "PREEMPTED" || s == "BOOT_FAIL" ||
           s == "DEADLINE";
  }
};

// The throwaway cluster: started in a new temporary folder by the
// constructor, stopped and removed by stop() or the destructor. A watcher
// started with it does the same if this process dies first.
class SlurmCluster {
 public:
  SlurmCluster() {
    char tmpl[] = "/tmp/tq-slurm-XXXXXX";
    if (!::mkdtemp(tmpl)) return;
    dir_ = tmpl;
    start_ = shell("bash " + quote(cluster_script()) + " start " + quote(dir_.string()) +
                   " --owner " + std::to_string(::getpid()));
    for (const char* d : {"munged", "slurmctld", "slurmd"}) {
      std::ifstream in(dir_ / "slurm/run" / (std::string(d) + ".pid"));
      pid_t pid = 0;
      if (in >> pid) daemons_[d] = pid;
    }
  }
  ~SlurmCluster() { stop(); }
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  bool up() const { return start_.rc == 0 && daemons_.size() == 3; }
  const Result& start_result() const { return start_; }
  const fs::path& dir() const { return dir_; }
  const std::map<std::string, pid_t>& daemons() const { return daemons_; }

  // `command` (bash) in `cwd`, against the cluster.
  Result run(const std::string& cwd, const std::string& command) const {
    return shell("cd " + quote(cwd) + " && bash " + quote(cluster_script()) + " run " +
                 quote(dir_.string()) + " bash -c " + quote(command));
  }

  // The records of job `id` (all tasks of an array).
  std::vector<SlurmJob> jobs(const std::string& id) const {
    std::vector<SlurmJob> out;
    std::istringstream lines(run("/", "scontrol -o show job " + id).out);
    for (std::string line; std::getline(lines, line);) {
      SlurmJob j;
      std::istringstream words(line);
      for (std::string w; words >> w;) {
        const size_t eq = w.find('=');
        if (eq != std::string::npos) j.fields[w.substr(0, eq)] = w.substr(eq + 1);
      }
      if (!j.get("JobId").empty()) out.push_back(j);
    }
    return out;
  }

  // Waits (at most `limit_s`) until every record of job `id` has finished.
  bool wait_finished(const std::string& id, int limit_s) const {
    return wait_until(
        [&] {
          const auto js = jobs(id);
          for (const auto& j : js)
            if (!j.finished()) return false;
          return !js.empty();
        },
        limit_s, 500);
  }

  // The daemons' logs and the queue, for a failure message.
  std::string diagnostics() const {
    return run("/", "squeue; scontrol -o show job").out +
           shell("bash " + quote(cluster_script()) + " logs " + quote(dir_.string()) + " 2>&1").out;
  }

  // Stops everything and removes the folder; the script's result.
  Result stop() {
    if (dir_.empty()) return {0, ""};
    Result r = shell("bash " + quote(cluster_script()) + " stop " + quote(dir_.string()));
    stopped_dir_ = dir_;
    dir_.clear();
    return r;
  }
  const fs::path& stopped_dir() const { return stopped_dir_; }

 private:
  fs::path dir_, stopped_dir_;
  Result start_;
  std::map<std::string, pid_t> daemons_;
};

}  // namespace tqslurm
