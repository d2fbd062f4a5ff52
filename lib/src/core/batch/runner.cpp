// The batch runner: each job's quantize (and evaluate) in its own process
// group, at most N at a time, with a deadline; results from exit status,
// reports and logs.
#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include <spdlog/spdlog.h>

#include "core/batch/internal.h"
#include "taoquant/interrupt.h"
#include "taoquant/result_files.h"

extern char** environ;

namespace tq {

namespace fs = std::filesystem;
using batch_detail::JobPlan;
using Clock = std::chrono::steady_clock;

int usable_cores() {
  int n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  // A container's CPU quota (cgroup v2 cpu.max: "QUOTA PERIOD" or "max PERIOD").
  std::ifstream in("/sys/fs/cgroup/cpu.max");
  std::string quota;
  double period = 0;
  if (in >> quota >> period && quota != "max" && period > 0) {
    const int q = static_cast<int>(std::ceil(std::atof(quota.c_str()) / period));
    if (q > 0 && q < n) n = q;
  }
  return std::max(1, n);
}

namespace {

std::string signal_text(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  const char* desc = ::strsignal(sig);
  std::string s = "signal " + std::to_string(sig);
  if (abbrev) s += " (SIG" + std::string(abbrev) + (desc ? ": " + std::string(desc) : "") + ")";
  return s;
}

std::string shell_quote(const std::string& s) {
  bool plain = !s.empty();
  for (char c : s)
    plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_./=:,+@%", c));
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The forked child: its own process group that dies with `parent`, default
// signal handling, stdin from /dev/null, stdout and stderr to the job's
// log, then the tao-quant binary. Only async-signal-safe calls.
[[noreturn]] void exec_child(pid_t parent, int null_fd, int log_fd, std::vector<char*>& argv,
                             std::vector<char*>& envp) {
  static const char kExecFailed[] =
      "tao-quant: error: batch: cannot execute the tao-quant binary\n";
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed batch leaves no orphan writing results
  if (::getppid() != parent) ::_exit(125);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGHUP, SIGQUIT}) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::dup2(null_fd, STDIN_FILENO);
  ::dup2(log_fd, STDOUT_FILENO);
  ::dup2(log_fd, STDERR_FILENO);
  ::execve(argv[0], argv.data(), envp.data());
  if (::write(STDERR_FILENO, kExecFailed, sizeof kExecFailed - 1) < 0) { /* nothing to do */
  }
  ::_exit(127);
}

struct Active {
  size_t pos = 0;  // in this shard's job list
  JobPlan plan;
  JobResult result;
  pid_t pid = -1;
  Clock::time_point started;
  std::optional<Clock::time_point> deadline;
  double timeout_s = 0;
  bool term_sent = false, kill_sent = false, timed_out = false, interrupted = false;
  Clock::time_point kill_at;
};

class Runner {
 public:
  Runner(const Manifest& m, const BatchOptions& o);
  BatchSummary run();

 private:
  const Manifest& m_;
  const BatchOptions& o_;
  int threads_ = 1;
  std::vector<std::string> env_;
  batch_detail::HashCache cache_;
  std::vector<const BatchJob*> todo_;
  std::vector<std::optional<JobResult>> results_;
  std::vector<std::unique_ptr<Active>> active_;
  BatchProgress progress_;
  Clock::time_point t0_ = Clock::now();
  bool stop_ = false, interrupted_ = false;
  std::string stop_reason_;

  double since(Clock::time_point t) const {
    return std::chrono::duration<double>(Clock::now() - t).count();
  }
  void start(size_t pos);
  bool resumed(const Active& a);  // --resume found its recorded result
  void set_deadline(Active& a, const BatchJob& job) const;
  bool spawn(Active& a, const std::string& stage);
  bool handle_exit(Active& a, int status);  // true: the job is done
  void complete(Active& a);
  void signal_group(Active& a, int sig);
  void check_deadlines();
  void interrupt_all();
  bool reap();  // true when a job finished
  void tick();
  BatchSummary summary() const;
};

Runner::Runner(const Manifest& m, const BatchOptions& o) : m_(m), o_(o) {
  threads_ =
      o.threads_per_job > 0 ? o.threads_per_job : std::max(1, usable_cores() / std::max(1, o.jobs));
  const char* drop[] = {
      "OMP_NUM_THREADS=", "TQ_NUM_THREADS=", "MKL_NUM_THREADS=", "TQ_BATCH_JOB_ID="};
  for (char** e = environ; e && *e; ++e) {
    bool keep = true;
    for (const char* d : drop) keep = keep && std::strncmp(*e, d, std::strlen(d)) != 0;
    if (keep) env_.emplace_back(*e);
  }
  for (const char* var : {"OMP_NUM_THREADS=", "TQ_NUM_THREADS=", "MKL_NUM_THREADS="})
    env_.push_back(var + std::to_string(threads_));
  for (const auto& j : m.jobs)
    if (o.shard.contains(j.index)) todo_.push_back(&j);
  results_.resize(todo_.size());
  progress_.total = todo_.size();
}

// Runs `tao-quant <stage> -e SPEC overrides...` with its output appended to
// the job's log, in a new process group that dies with us.
bool Runner::spawn(Active& a, const std::string& stage) {
  const JobPlan& p = a.plan;
  std::vector<std::string> args = {o_.exe};
  args.insert(args.end(), o_.child_args.begin(), o_.child_args.end());
  args.insert(args.end(), {stage, "-e", p.job->spec});
  args.insert(args.end(), p.overrides.begin(), p.overrides.end());
  if (stage == "evaluate") args.push_back("--compare");
  a.result.stage = stage;

  const std::string log = (fs::path(p.dir) / "log.txt").string();
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (log_fd < 0 || null_fd < 0) {
    a.result.message = "cannot open the job log '" + log + "': " + std::strerror(errno);
    if (log_fd >= 0) ::close(log_fd);
    if (null_fd >= 0) ::close(null_fd);
    return false;
  }
  std::string header = "$";
  for (const auto& s : args) header += " " + shell_quote(s);
  header += "\n# job " + p.job->id + ", stage " + stage + ", " + std::to_string(threads_) +
            " thread(s) (OMP_NUM_THREADS, TQ_NUM_THREADS)\n";
  if (::write(log_fd, header.data(), header.size()) < 0) { /* the header is best effort */
  }

  // Everything the child needs is built before fork().
  std::vector<std::string> env = env_;
  env.push_back("TQ_BATCH_JOB_ID=" + p.job->id);
  std::vector<char*> argv, envp;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid == 0) exec_child(parent, null_fd, log_fd, argv, envp);
  const int fork_errno = errno;
  ::close(log_fd);
  ::close(null_fd);
  if (pid < 0) {
    a.result.message = std::string("cannot start a process: ") + std::strerror(fork_errno);
    return false;
  }
  ::setpgid(pid, pid);  // also here, so that a kill(-pid) right after fork() works
  a.pid = pid;
  return true;
}

// --resume: a job whose recorded result still holds counts as done.
bool Runner::resumed(const Active& a) {
  std::string why;
  if (auto rec = batch_detail::recorded_result(a.plan, why)) {
    results_[a.pos] = *rec;
    ++progress_.done;
    progress_.elapsed_s = since(t0_);
    if (o_.on_job_done) o_.on_job_done(*rec, progress_);
    return true;
  }
  if (refused_result(why))  // refused, not merely stale: say so
    spdlog::warn("batch: {} runs again: {}", a.plan.job->id, why);
  else
    spdlog::debug("batch: {} runs again: {}", a.plan.job->id, why);
  return false;
}

// The job's timeout: its own, else the command line's, else the manifest's.
void Runner::set_deadline(Active& a, const BatchJob& job) const {
  double timeout = 0;
  if (job.timeout_s)
    timeout = *job.timeout_s;
  else if (o_.timeout_s)
    timeout = *o_.timeout_s;
  else if (m_.default_timeout_s)
    timeout = *m_.default_timeout_s;
  if (timeout <= 0) return;
  a.timeout_s = timeout;
  a.deadline = a.started +
               std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout));
}

void Runner::start(size_t pos) {
  const BatchJob& job = *todo_[pos];
  if (o_.on_job_start) o_.on_job_start(job);
  auto a = std::make_unique<Active>();
  a->pos = pos;
  a->started = Clock::now();
  a->plan = batch_detail::plan_job(job, o_.out_dir, cache_);
  JobResult& r = a->result;
  r.id = job.id;
  r.index = job.index;
  r.spec = job.spec;
  r.model = a->plan.model;
  r.backend = a->plan.backend;
  r.mode = a->plan.mode;
  r.dir = a->plan.dir;
  r.stage = "quantize";

  if (o_.resume && resumed(*a)) return;
  std::error_code ec;
  fs::create_directories(a->plan.dir, ec);
  if (ec)
    throw RuntimeError("cannot create the job directory '" + a->plan.dir + "': " + ec.message());
  batch_detail::clear_job_dir(a->plan);

  set_deadline(*a, job);
  if (!a->plan.spec_error.empty()) {
    r.status = JobStatus::kFailed;
    r.failure = "spec";
    r.exit_code = static_cast<int>(ExitCode::kUsage);
    r.message = a->plan.spec_error;
    std::ofstream(fs::path(a->plan.dir) / "log.txt") << "tao-quant: error: " << r.message << "\n";
    complete(*a);
    return;
  }
  if (!spawn(*a, "quantize")) {
    r.status = JobStatus::kFailed;
    r.failure = "start";
    r.exit_code = -1;
    complete(*a);
    return;
  }
  active_.push_back(std::move(a));
}

bool Runner::handle_exit(Active& a, int status) {
  JobResult& r = a.result;
  const std::string stage = r.stage;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  a.pid = -1;
  const std::string log = (fs::path(a.plan.dir) / "log.txt").string();
  auto printed = [&] { return batch_detail::error_message(batch_detail::tail_lines(log, 100000)); };
  r.status = JobStatus::kFailed;
  if (a.interrupted) {
    r.failure = "interrupted";
    r.message = "interrupted during " + stage + " (the batch got SIGINT or SIGTERM)";
  } else if (a.timed_out) {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", a.timeout_s);
    r.failure = "timeout";
    r.message = "timed out after " + std::string(secs) + " s in " + stage + "; stopped with " +
                (a.kill_sent ? "SIGKILL (SIGTERM was not enough)" : "SIGTERM");
  } else if (r.signal) {
    r.failure = "signal";
    r.message = stage + " was killed by " + signal_text(r.signal);
    if (r.signal == SIGKILL)
      r.message += " from outside tao-quant: most likely the kernel's out-of-memory killer";
  } else if (r.exit_code == static_cast<int>(ExitCode::kGate) && stage == "evaluate") {
    r.failure = "gate";
    std::string gates;
    for (const auto& g : batch_detail::violated_gates(a.plan.dir))
      gates += (gates.empty() ? "" : "; ") + g;
    if (gates.empty()) gates = printed();
    r.message = "quality gate failed" + (gates.empty() ? std::string() : ": " + gates);
  } else if (r.exit_code != 0) {
    r.failure = "exit";
    const std::string msg = printed();
    r.message = stage + " failed (exit code " + std::to_string(r.exit_code) + ")" +
                (msg.empty() ? "" : ": " + msg);
  } else if (stage == "quantize" && a.plan.job->evaluate) {
    if (spawn(a, "evaluate")) return false;
    r.failure = "start";
    r.exit_code = -1;
  } else {
    r.status = JobStatus::kPassed;
  }
  return true;
}

void Runner::complete(Active& a) {
  JobResult& r = a.result;
  r.duration_s = since(a.started);
  batch_detail::read_job_metrics(a.plan.dir, r);
  if (r.status == JobStatus::kFailed)
    r.log_tail = batch_detail::tail_lines((fs::path(a.plan.dir) / "log.txt").string(), 20);
  r.message = batch_detail::sanitize_utf8(r.message);
  try {
    batch_detail::write_job_result(a.plan, r);
  } catch (const Error& e) {
    spdlog::warn("batch: {}: {}", r.id, e.what());
  }
  results_[a.pos] = r;
  ++progress_.done;
  if (r.status == JobStatus::kFailed) {
    ++progress_.failed;
    if (!o_.keep_going && !stop_) {
      stop_ = true;
      stop_reason_ = "not run: job '" + r.id + "' failed and --keep-going is off";
    }
  }
  progress_.running = active_.size();
  progress_.elapsed_s = since(t0_);
  if (o_.on_job_done) o_.on_job_done(r, progress_);
}

void Runner::signal_group(Active& a, int sig) {
  if (a.pid > 0) ::kill(-a.pid, sig);
}

void Runner::check_deadlines() {
  const auto now = Clock::now();
  for (auto& a : active_) {
    if (!a->term_sent && a->deadline && now >= *a->deadline) {
      a->timed_out = true;
      a->term_sent = true;
      a->kill_at = now + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(o_.kill_grace_s));
      signal_group(*a, SIGTERM);
    } else if (a->term_sent && !a->kill_sent && now >= a->kill_at) {
      a->kill_sent = true;
      signal_group(*a, SIGKILL);
    }
  }
}

void Runner::tick() {
  progress_.running = active_.size();
  progress_.elapsed_s = since(t0_);
  if (o_.on_progress) o_.on_progress(progress_);
}

// SIGINT/SIGTERM: no job starts any more, and each running one gets SIGTERM
// (SIGKILL after the grace period: check_deadlines).
void Runner::interrupt_all() {
  interrupted_ = stop_ = true;
  stop_reason_ = "not run: the batch was interrupted";
  const auto now = Clock::now();
  for (auto& a : active_) {
    a->interrupted = a->term_sent = true;
    a->kill_at = now + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(o_.kill_grace_s));
    signal_group(*a, SIGTERM);
  }
}

bool Runner::reap() {
  bool changed = false;
  for (size_t i = 0; i < active_.size();) {
    int status = 0;
    const pid_t got = ::waitpid(active_[i]->pid, &status, WNOHANG);
    const bool lost =
        got < 0 && errno == ECHILD;  // not ours any more: cannot happen, but never spin
    if (lost) {
      active_[i]->result.status = JobStatus::kFailed;
      active_[i]->result.failure = "start";
      active_[i]->result.message = "lost track of the job's process";
    }
    if (lost || (got == active_[i]->pid && handle_exit(*active_[i], status))) {
      std::unique_ptr<Active> done = std::move(active_[i]);
      active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(i));
      complete(*done);
      changed = changed || !lost;
      continue;
    }
    ++i;
  }
  return changed;
}

BatchSummary Runner::run() {
  InterruptGuard guard;  // SIGINT/SIGTERM stop the jobs; the command exits 130/143
  size_t next = 0;
  auto last_tick = Clock::now() - std::chrono::seconds(1);
  for (;;) {
    if (interrupt_signal() && !interrupted_) interrupt_all();
    bool changed = false;
    while (!stop_ && next < todo_.size() &&
           active_.size() < static_cast<size_t>(std::max(1, o_.jobs))) {
      start(next++);
      changed = true;
    }
    if (active_.empty() && (stop_ || next >= todo_.size())) break;
    changed = reap() || changed;
    check_deadlines();
    if (changed || Clock::now() - last_tick >= std::chrono::milliseconds(500)) {
      tick();
      last_tick = Clock::now();
    }
    if (!active_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  tick();
  return summary();
}

// Every job of the shard: its result, or skipped with why it did not run.
BatchSummary Runner::summary() const {
  BatchSummary s;
  s.manifest_path = m_.path;
  s.manifest_name = m_.name;
  s.manifest_hash = m_.hash;
  for (const auto& j : m_.jobs) s.job_ids.push_back(j.id);
  s.shard = o_.shard;
  for (size_t pos = 0; pos < todo_.size(); ++pos) {
    if (results_[pos]) {
      s.jobs.push_back(*results_[pos]);
      continue;
    }
    JobResult r;
    const BatchJob& j = *todo_[pos];
    r.id = j.id;
    r.index = j.index;
    r.spec = j.spec;
    r.model = j.model;
    r.status = JobStatus::kSkipped;
    r.failure = interrupted_ ? "interrupted" : "not_run";
    r.exit_code = -1;
    r.message = stop_reason_;
    s.jobs.push_back(std::move(r));
  }
  s.wall_s = since(t0_);
  return s;
}

}  // namespace

BatchSummary run_batch(const Manifest& manifest, const BatchOptions& opts) {
  if (opts.exe.empty()) throw UsageError("batch: no tao-quant binary to run the jobs with");
  std::error_code ec;
  fs::create_directories(opts.out_dir, ec);
  if (ec || !fs::is_directory(opts.out_dir))
    throw RuntimeError("cannot create the batch output directory '" + opts.out_dir +
                       "': " + (ec ? ec.message() : "not a directory"));
  Runner runner(manifest, opts);
  return runner.run();
}

}  // namespace tq
