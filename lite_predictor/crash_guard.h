// Runs the predictor's work in a child process so that a crash inside LibTorch (a corrupted model can
// make its parsers or kernels fault) becomes a message and an exit code instead of a dead process.
#pragma once

#include <functional>
#include <string>

namespace lightweight_dispatch {

// Starting up: before the model file is read (LibTorch's CPU detection, thread pool, ...).
enum class Phase : char { StartingUp = 'S', Loading = 'L', Running = 'R' };

// Lets the child say what it is doing, so a crash can be reported as "while loading" or "while running".
class PhaseReporter {
 public:
  explicit PhaseReporter(int fd = -1) : fd_(fd) {}
  void enter(Phase phase) const;

 private:
  int fd_;
};

struct CrashExitCodes {
  int while_starting; // a crash before the model was read says nothing about the model
  int while_loading;
  int while_running;
};

// Forks; the child runs `work` and exits with its result; the parent waits and returns the child's exit
// code, or, if the child died by a signal, prints what happened on stderr and returns the code for the
// phase it died in: a crash while starting up is the runtime's, one while loading or running the model's. With `in_process`, runs `work` directly (for debuggers and profilers).
int run_guarded(
    const std::function<int(const PhaseReporter&)>& work,
    const std::string& model_path,
    CrashExitCodes codes,
    bool in_process);

} // namespace lightweight_dispatch
