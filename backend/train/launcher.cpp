#include "backend/train/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <ostream>
#include <random>

#include "backend/build_info.h"
#include "backend/train/loom_executable.h"
#include "backend/train/rank_env.h"
#include "backend/train/scoped_signal.h"

namespace loom {
namespace {

volatile sig_atomic_t interrupted = 0;
void on_interrupt(int) { interrupted = 1; }

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  int err_fd = -1;
  std::string partial;            // an unfinished output line
  std::deque<std::string> last;   // its last stderr lines, for the failure message
  bool running = true;
  int status = 0;
  bool ended_unstopped = false;  // it ended before the launcher signalled any rank
  bool said_error = false;       // a line of its output started "error: " or said an internal error
  bool said_another = false;     // a line said kAnotherRankStopped: it failed because another rank did
};

void forward(Worker& w, const std::string& text, std::ostream& err, bool prefix) {
  w.partial += text;
  size_t nl;
  while ((nl = w.partial.find('\n')) != std::string::npos) {
    std::string line = w.partial.substr(0, nl);
    w.partial.erase(0, nl + 1);
    err << (prefix ? "[rank " + std::to_string(w.rank) + "] " : "") << line << "\n";
    err.flush();
    w.said_error = w.said_error || line.rfind("error: ", 0) == 0 || line.rfind(kInternalErrorPrefix, 0) == 0;
    w.said_another = w.said_another || line.find(kAnotherRankStopped) != std::string::npos;
    if (!line.empty()) {
      w.last.push_back(line);
      if (w.last.size() > 5) w.last.pop_front();
    }
  }
}

// Relays what a worker has written so far; at the end of its output, closes its pipe.
void drain(Worker& w, std::ostream& err, bool prefix) {
  char buf[4096];
  while (w.err_fd >= 0) {
    ssize_t n = read(w.err_fd, buf, sizeof buf);
    if (n > 0) {
      forward(w, std::string(buf, n), err, prefix);
      continue;
    }
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      if (!w.partial.empty()) forward(w, "\n", err, prefix);
      close(w.err_fd);
      w.err_fd = -1;
    }
    return;
  }
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return std::string("killed by signal ") + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "status " + std::to_string(status);
}

// The launcher's Ctrl-C and SIGTERM handlers, for as long as it runs workers (a forked worker
// starts with those from before them: become_program).
struct LauncherSignals {
  ScopedSignalHandler ctrl_c{SIGINT, on_interrupt}, term{SIGTERM, on_interrupt};
};

// A worker, given the pipe for its stderr: a fork of this process running the program where
// `forked`, else the program exec'd.
pid_t spawn(const LaunchSpec& spec, const RankEnv& env, int err_write_fd, bool forked) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  // Child: die with the launcher, report errors through the pipe, run or exec the worker.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  dup2(err_write_fd, STDERR_FILENO);
  close(err_write_fd);
  for (auto& [k, v] : torchrun_variables(env)) setenv(k.c_str(), v.c_str(), 1);
  setenv(kLaunchedByLoom, "1", 1);
  become_program(spec.argv, forked);
}

// Binds a TCP socket to `address`:`port` (port 0: one the kernel picks from its ephemeral range)
// and closes it: the port it bound, or -1 where it could not.
int probe_bind(in_addr_t address, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(address);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof addr;
  int bound = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    bound = ntohs(addr.sin_port);
  close(fd);
  return bound;
}

}  // namespace

int pick_free_port() {
  // Below the ephemeral ports (32768 on, Linux's default): rank 0 binds the port a second or two
  // after this probe, once LibTorch has loaded, and a port from the ephemeral range can be
  // handed meanwhile to any process's connection or listener (gloo opens dozens); one below it
  // only to a launcher that draws the same number.
  std::mt19937 draw(std::random_device{}());
  std::uniform_int_distribution<int> below_ephemeral(10000, 18999);  // tests draw torchrun's from 19000 on
  for (int attempt = 0; attempt < 32; ++attempt)  // free on the IPv4 wildcard, which the store's dual-stack [::] also needs
    if (int port = below_ephemeral(draw); probe_bind(INADDR_ANY, port) == port) return port;
  int ephemeral = probe_bind(INADDR_LOOPBACK, 0);
  return ephemeral > 0 ? ephemeral : 29500;
}

namespace {

// Starts this node's ranks, each writing its stderr into a pipe of its own; false (having said
// why) when a pipe cannot be made.
bool spawn_workers(const LaunchSpec& spec, int port, std::vector<Worker>& workers, std::ostream& err) {
  bool forked = spec.fork_program && can_fork_program();
  std::fflush(nullptr);  // what this process has written, before a forked worker could write it again
  for (int i = 0; i < spec.nproc; ++i) {
    RankEnv env;
    env.rank = spec.node_rank * spec.nproc + i;
    env.world = spec.nproc * spec.nnodes;
    env.local_rank = i;
    env.local_world = spec.nproc;
    env.master_addr = spec.master_addr;
    env.master_port = port;
    int fds[2];
    if (pipe(fds) != 0) {
      err << "loom run: cannot create a pipe: " << std::strerror(errno) << "\n";
      return false;
    }
    workers[i].rank = env.rank;
    workers[i].pid = spawn(spec, env, fds[1], forked);
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    workers[i].err_fd = fds[0];
  }
  return true;
}

// Whether a rank said it failed because another rank stopped (kAnotherRankStopped):
// the consequence of a failure, not its cause.
bool failed_for_another(const Worker& w) { return w.said_another; }

// Whether a rank said an error of its own (a user's or an internal one), not only that another
// rank stopped: it is exiting by itself.
bool said_own_error(const Worker& w) { return w.said_error && !w.said_another; }

// How long the others are left to exit on their own when the first rank to fail failed only
// because another closed its connections: that rank is most likely exiting already (it closes
// them once it has printed its error, then tears down), and stopping it would report our
// SIGTERM instead of its own exit. A cause that stalls instead costs this much more.
constexpr std::chrono::seconds kPeerExitWait{5};

// Relays the workers' output until every one has exited. The first to fail, or an interrupt,
// stops the others: SIGTERM (after kPeerExitWait where the first failed for another; not to a
// rank that said an error of its own, unless interrupted), then SIGKILL after the grace period.
// Returns the index of the first worker that failed, -1 if none did.
int supervise(const LaunchSpec& spec, std::vector<Worker>& workers, bool prefix, std::ostream& err) {
  int failed = -1;
  bool stopping = false, terminated = false;
  auto term_at = std::chrono::steady_clock::now(), stop_deadline = term_at;
  auto stop_all = [&](int sig) {
    for (auto& w : workers)
      if (w.running && (sig != SIGTERM || interrupted || !said_own_error(w))) kill(w.pid, sig);
  };
  while (true) {
    std::vector<pollfd> fds;
    for (auto& w : workers)
      if (w.err_fd >= 0) fds.push_back({w.err_fd, POLLIN, 0});
    if (!fds.empty()) poll(fds.data(), fds.size(), 100);
    else usleep(100 * 1000);
    for (auto& w : workers)
      drain(w, err, prefix);
    bool any_running = false;
    for (size_t i = 0; i < workers.size(); ++i) {
      Worker& w = workers[i];
      if (!w.running) continue;
      int status = 0;
      if (waitpid(w.pid, &status, WNOHANG) == w.pid) {
        w.running = false;
        w.status = status;
        w.ended_unstopped = !terminated;
        drain(w, err, prefix);  // its last lines, for failed_for_another
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && failed < 0 && !stopping) failed = static_cast<int>(i);
      } else {
        any_running = true;
      }
    }
    if (!any_running) break;
    auto now = std::chrono::steady_clock::now();
    if ((failed >= 0 || interrupted) && !stopping) {
      stopping = true;
      bool wait_for_peer = failed >= 0 && !interrupted && failed_for_another(workers[failed]);
      term_at = wait_for_peer ? now + kPeerExitWait : now;
      stop_deadline = term_at + spec.grace;
    }
    if (stopping && !terminated && (now >= term_at || interrupted)) {
      terminated = true;
      stop_all(SIGTERM);
      if (interrupted) stop_deadline = std::min(stop_deadline, now + spec.grace);  // Ctrl-C during the wait for a peer
    }
    if (stopping && now > stop_deadline) stop_all(SIGKILL);
  }
  for (auto& w : workers) {
    drain(w, err, prefix);
    if (w.err_fd >= 0) close(w.err_fd);  // a process the rank started may hold it open still
    w.err_fd = -1;
  }
  return failed;
}

// The rank whose failure to report: the first that failed, unless it failed only because
// another stopped and another rank said an error of its own (a rank that fails on its own
// closes its connections as it exits, and a peer's collective can fail and exit first), or
// else was killed by a signal the launcher did not send (both can be reaped in one pass).
size_t failure_cause(const std::vector<Worker>& workers, size_t first) {
  if (!failed_for_another(workers[first])) return first;
  auto other_rank_that = [&](auto&& caused_it) {
    for (size_t i = 0; i < workers.size(); ++i) {
      const Worker& w = workers[i];
      bool ok = WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0;
      if (i != first && !ok && caused_it(w)) return i;
    }
    return first;
  };
  if (size_t said = other_rank_that(said_own_error); said != first) return said;
  return other_rank_that([](const Worker& w) { return WIFSIGNALED(w.status) && w.ended_unstopped && !failed_for_another(w); });
}

// The failed rank, how it ended and its error line (not a hint printed after it).
void report_failure(const Worker& w, std::ostream& err) {
  err << "loom run: rank " << w.rank << " failed (" << describe_exit(w.status) << ")";
  std::string quoted = w.last.empty() ? "" : w.last.back();
  for (auto& line : w.last)
    if (line.find("error") != std::string::npos) quoted = line;
  if (!quoted.empty()) err << ": " << quoted;
  err << "\nloom run: stopped the other ranks\n";
}

}  // namespace

int launch(const LaunchSpec& spec, std::ostream& err) {
  int port = spec.master_port > 0 ? spec.master_port : (spec.nnodes == 1 ? pick_free_port() : 29500);
  // Ctrl-C and SIGTERM stop the workers while they run; the caller's handlers are back afterwards.
  interrupted = 0;
  LauncherSignals signals;
  std::vector<Worker> workers(spec.nproc);
  if (!spawn_workers(spec, port, workers, err)) return 1;
  int failed = supervise(spec, workers, /*prefix=*/spec.nproc * spec.nnodes > 1, err);
  if (failed >= 0) {
    report_failure(workers[failure_cause(workers, static_cast<size_t>(failed))], err);
    return 1;
  }
  if (interrupted) {
    err << "loom run: interrupted; stopped all ranks\n";
    return 130;
  }
  return 0;
}

}  // namespace loom
