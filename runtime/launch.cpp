#include "launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <thread>

namespace optpipe::runtime {
namespace {

// A port the kernel just handed out on the loopback interface (free unless taken in between).
int free_tcp_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

std::string how_it_ended(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "ended";
}

bool parse_int(const char* text, int* out) {
  if (!text || !*text) return false;
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (*end || v < INT_MIN || v > INT_MAX) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

Result<RankEnv> rank_env() {
  using R = Result<RankEnv>;
  RankEnv e;
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (!rank && !world) return R::Of(e);
  if (!parse_int(rank, &e.rank) || !parse_int(world, &e.world_size) || e.world_size < 1 || e.rank < 0 ||
      e.rank >= e.world_size)
    return R::Error(Status::Invalid("RANK and WORLD_SIZE must be integers with 0 ≤ RANK < WORLD_SIZE"));
  if (!addr || !*addr) return R::Error(Status::Invalid("MASTER_ADDR is not set"));
  if (!parse_int(port, &e.master_port) || e.master_port < 1 || e.master_port > 65535)
    return R::Error(Status::Invalid("MASTER_PORT must be a port number"));
  e.master_addr = addr;
  e.local_rank = e.rank;
  if (const char* local = std::getenv("LOCAL_RANK"); local && (!parse_int(local, &e.local_rank) || e.local_rank < 0))
    return R::Error(Status::Invalid("LOCAL_RANK must be an integer ≥ 0"));
  e.local_world_size = e.world_size;
  if (const char* local = std::getenv("LOCAL_WORLD_SIZE");
      local && (!parse_int(local, &e.local_world_size) || e.local_world_size <= e.local_rank))
    return R::Error(Status::Invalid("LOCAL_WORLD_SIZE must be an integer > LOCAL_RANK"));
  if (const char* dir = std::getenv("OPTPIPE_RUN_DIR")) e.run_dir = dir;
  e.present = true;
  return R::Of(e);
}

Status launch_local(const LaunchSpec& spec) {
  const char* exe = spec.argv.at(0).c_str();
  const int port = free_tcp_port();
  if (port <= 0) return Status::Invalid("no free TCP port on 127.0.0.1 for the rendezvous");

  std::vector<pid_t> pids(spec.world_size, -1);
  for (int r = 0; r < spec.world_size; r++) {
    const pid_t pid = fork();
    if (pid < 0) {
      for (pid_t p : pids)
        if (p > 0) kill(p, SIGKILL);
      return Status::Invalid("fork failed for rank " + std::to_string(r));
    }
    if (pid == 0) {
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(spec.world_size).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(spec.world_size).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("OPTPIPE_RUN_DIR", spec.run_dir.c_str(), 1);
      std::vector<char*> args;
      for (const std::string& a : spec.argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(exe, args.data());
      _exit(127);
    }
    pids[r] = pid;
  }

  std::vector<int> status(spec.world_size, 0);
  std::vector<bool> done(spec.world_size, false), killed(spec.world_size, false);
  int remaining = spec.world_size, first_failed = -1;
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (remaining > 0) {
    for (int r = 0; r < spec.world_size; r++) {
      if (done[r]) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) != pids[r]) continue;
      done[r] = true;
      status[r] = st;
      remaining--;
      if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && first_failed < 0) {
        first_failed = r;
        deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                          std::chrono::duration<double>(spec.grace_s));
      }
    }
    if (remaining > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < spec.world_size; r++)
        if (!done[r] && !killed[r]) {
          kill(pids[r], SIGKILL);
          killed[r] = true;
        }
    }
    if (remaining > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (first_failed < 0) return Status::Ok();
  std::string msg =
      "rank " + std::to_string(first_failed) + " failed first (" + how_it_ended(status[first_failed]) + ")";
  for (int r = 0; r < spec.world_size; r++) {
    if (r == first_failed) continue;
    msg +=
        "; rank " + std::to_string(r) + " " +
        (killed[r] ? "was still running " + std::to_string(static_cast<int>(spec.grace_s)) + " s later and was killed"
                   : how_it_ended(status[r]));
  }
  return Status::Invalid(msg);
}

}  // namespace optpipe::runtime
