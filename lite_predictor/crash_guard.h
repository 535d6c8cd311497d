// Turns a crash inside LibTorch (a corrupted model can make its parsers or kernels fault) into a message and an
// exit code instead of a dead process.
//
// The guard is a handler for the signals a fault raises (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP,
// SIGSYS), installed in this process for the length of the work: it writes one line on stderr with write(2) and
// leaves with _exit, so it needs neither the heap nor any lock a crashed thread may hold. The main thread's
// handler runs on a stack of its own, so a stack overflow there is reported too. An earlier guard ran the work
// in a forked child: every page the child first wrote that the parent had touched (LibTorch's operator tables,
// the heap) was copied on that write, 17-20 ms of a fresh process's load and first run. What this guard cannot
// report, the fork could: a kill by SIGKILL (the out-of-memory killer), and a stack overflow on a thread other
// than the main one; those still end the process by the signal.
#pragma once

#include <functional>
#include <string>

namespace lightweight_dispatch {

// Starting up: before the model file is read (LibTorch's CPU detection, thread pool, ...).
enum class Phase : char { StartingUp = 'S', Loading = 'L', Running = 'R' };

// Lets the work say what it is doing, so a crash can be reported as "while loading" or "while running".
class PhaseReporter {
 public:
  void enter(Phase phase) const;
};

struct CrashExitCodes {
  int while_starting; // a crash before the model was read says nothing about the model
  int while_loading;
  int while_running;
};

// Runs `work` and returns its result. If a fault signal arrives meanwhile, on any thread, the process writes what
// happened on stderr and exits with the code for the phase it was in: a crash while starting up is the runtime's,
// one while loading or running the model's. Without `guarded`, runs `work` with the signals' handlers as they
// were (for debuggers, profilers and core dumps). Once per process: the handlers are not removed afterwards,
// since the process exits with the work's result.
int run_guarded(
    const std::function<int(const PhaseReporter&)>& work,
    const std::string& model_path,
    CrashExitCodes codes,
    bool guarded);

} // namespace lightweight_dispatch
