// lite_predictor's crash guard, from C++: a fault is reported for the phase it happened in, a fault before the
// model is read is the runtime's start-up failing, not a damaged file; faults on other threads and a stack
// overflow are reported too; without the guard the signal ends the process. Each case runs in a child process
// of this check (the guard ends the process it guards).
#include <lite_predictor/crash_guard.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>

namespace ld = lightweight_dispatch;

namespace {

int passed = 0;
int failed = 0;

struct Outcome {
  int code;           // the exit code, or minus the signal that ended the process
  std::string stderr; // what the guard wrote
};

// Runs `work` under the guard (or not) in a child process; returns how the child ended and its stderr.
Outcome in_a_child(const std::function<int(const ld::PhaseReporter&)>& work, bool guarded = true) {
  int pipe_ends[2];
  if (pipe(pipe_ends) != 0) {
    return {-1000, "pipe failed"};
  }
  std::cout.flush();
  const pid_t child = fork();
  if (child == 0) {
    close(pipe_ends[0]);
    dup2(pipe_ends[1], STDERR_FILENO);
    _exit(ld::run_guarded(work, "model.ptl", {61, 63, 66}, guarded));
  }
  close(pipe_ends[1]);
  std::string text;
  char buffer[512];
  ssize_t got = 0;
  while ((got = read(pipe_ends[0], buffer, sizeof(buffer))) != 0) {
    if (got > 0) {
      text.append(buffer, static_cast<size_t>(got));
    } else if (errno != EINTR) {
      break;
    }
  }
  close(pipe_ends[0]);
  int status = 0;
  waitpid(child, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), text};
}

void expect(const std::string& what, const Outcome& got, int code, const std::string& text) {
  const bool ok = got.code == code && got.stderr.find(text) != std::string::npos;
  std::cout << (ok ? "ok   " : "FAIL ") << what << " (exit " << got.code << ": "
            << got.stderr.substr(0, got.stderr.find('\n')) << ")\n";
  ++(ok ? passed : failed);
}

// Recurses until the stack runs out (no stack is that deep); the array keeps each frame real.
volatile int unreachable_depth = -1;
int overflow_the_stack(int depth) {
  if (depth == unreachable_depth) {
    return 0;
  }
  volatile char frame[1024];
  frame[depth % sizeof(frame)] = static_cast<char>(depth);
  return overflow_the_stack(depth + 1) + frame[(depth + 1) % sizeof(frame)];
}

} // namespace

int main() {
  expect("a crash before the model is read is a start-up failure",
         in_a_child([](const ld::PhaseReporter&) { return std::raise(SIGSEGV); }), 61,
         "lite_predictor: error: LibTorch crashed (signal 11, Segmentation fault) while starting up, before "
         "model.ptl was read: the runtime itself failed");
  expect("a crash while loading blames the file",
         in_a_child([](const ld::PhaseReporter& phase) {
           phase.enter(ld::Phase::Loading);
           return std::raise(SIGSEGV);
         }),
         63, "lite_predictor: error: model.ptl: LibTorch crashed (signal 11, Segmentation fault) while loading this "
             "model; the file is probably damaged");
  expect("a crash while running is reported as such",
         in_a_child([](const ld::PhaseReporter& phase) {
           phase.enter(ld::Phase::Loading);
           phase.enter(ld::Phase::Running);
           return std::raise(SIGABRT);
         }),
         66, "model.ptl: LibTorch crashed (signal 6, Aborted) while running this model");
  expect("a crash on another thread is reported",
         in_a_child([](const ld::PhaseReporter& phase) {
           phase.enter(ld::Phase::Running);
           std::thread([] { std::raise(SIGBUS); }).join();
           return 0;
         }),
         66, "(signal 7, Bus error) while running this model");
  expect("a stack overflow on the main thread is reported",
         in_a_child([](const ld::PhaseReporter& phase) {
           phase.enter(ld::Phase::Loading);
           return overflow_the_stack(0);
         }),
         63, "(signal 11, Segmentation fault) while loading this model");
  expect("without the guard the signal ends the process",
         in_a_child([](const ld::PhaseReporter&) { return std::raise(SIGSEGV); }, false), -SIGSEGV, "");
  expect("work that returns passes its code through", in_a_child([](const ld::PhaseReporter&) { return 5; }), 5, "");
  std::cout << "crash_guard_check: " << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}
