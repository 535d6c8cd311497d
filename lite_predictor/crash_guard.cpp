#include <lite_predictor/crash_guard.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace lightweight_dispatch {

void PhaseReporter::enter(Phase phase) const {
  if (fd_ >= 0) {
    const char byte = static_cast<char>(phase);
    (void)!write(fd_, &byte, 1);
  }
}

int run_guarded(
    const std::function<int(const PhaseReporter&)>& work,
    const std::string& model_path,
    CrashExitCodes codes,
    bool in_process) {
  if (in_process) {
    return work(PhaseReporter());
  }
  int phase_pipe[2];
  if (pipe(phase_pipe) != 0) {
    return work(PhaseReporter());
  }
  std::cout.flush();
  std::cerr.flush();
  const pid_t child = fork();
  if (child < 0) {
    close(phase_pipe[0]);
    close(phase_pipe[1]);
    return work(PhaseReporter());
  }
  if (child == 0) {
    close(phase_pipe[0]);
    const int code = work(PhaseReporter(phase_pipe[1]));
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    _exit(code);
  }
  close(phase_pipe[1]);
  // Keep the last phase the child announced; the pipe closes when it exits.
  Phase last = Phase::StartingUp;
  char byte = 0;
  ssize_t got = 0;
  while ((got = read(phase_pipe[0], &byte, 1)) != 0) {
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got < 0) {
      break;
    }
    last = static_cast<Phase>(byte);
  }
  close(phase_pipe[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) {
      std::cerr << "lite_predictor: error: lost track of the worker process: " << std::strerror(errno) << "\n";
      return codes.while_running;
    }
  }
  if (WIFEXITED(status)) {
    return WEXITSTATUS(status);
  }
  const int signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  std::cerr << "lite_predictor: error: ";
  if (last == Phase::StartingUp) {
    std::cerr << "LibTorch crashed (signal " << signal << ", " << strsignal(signal) << ") while starting up, before "
              << model_path << " was read: the runtime itself failed on this machine (its CPU detection or thread "
                 "pool, for instance), not the model file\n";
    return codes.while_starting;
  }
  const bool loading = last == Phase::Loading;
  std::cerr << model_path << ": LibTorch crashed (signal " << signal << ", " << strsignal(signal) << ") while "
            << (loading ? "loading" : "running")
            << " this model; the file is probably damaged or was not made by a compatible exporter\n";
  return loading ? codes.while_loading : codes.while_running;
}

} // namespace lightweight_dispatch
