// lite_predictor's crash guard, from C++: a worker that dies by a signal is reported for the phase it died
// in, and a death before the model is read is the runtime's start-up failing, not a damaged file.
#include <lite_predictor/crash_guard.h>

#include <csignal>
#include <iostream>
#include <sstream>
#include <string>

namespace ld = lightweight_dispatch;

namespace {

int passed = 0;
int failed = 0;

// Runs `work` under the guard, returning the exit code and what the guard printed on stderr.
std::pair<int, std::string> guarded(const std::function<int(const ld::PhaseReporter&)>& work) {
  std::ostringstream captured;
  std::streambuf* previous = std::cerr.rdbuf(captured.rdbuf());
  const int code = ld::run_guarded(work, "model.ptl", {61, 63, 66}, false);
  std::cerr.rdbuf(previous);
  return {code, captured.str()};
}

void expect(const std::string& what, const std::pair<int, std::string>& got, int code, const std::string& text) {
  const bool ok = got.first == code && got.second.find(text) != std::string::npos;
  std::cout << (ok ? "ok   " : "FAIL ") << what << " (exit " << got.first << ": " << got.second.substr(0, got.second.find('\n'))
            << ")\n";
  ++(ok ? passed : failed);
}

} // namespace

int main() {
  expect("a crash before the model is read is a start-up failure",
         guarded([](const ld::PhaseReporter&) { return std::raise(SIGSEGV); }), 61,
         "while starting up, before model.ptl was read: the runtime itself failed");
  expect("a crash while loading blames the file",
         guarded([](const ld::PhaseReporter& phase) {
           phase.enter(ld::Phase::Loading);
           return std::raise(SIGSEGV);
         }),
         63, "model.ptl: LibTorch crashed (signal 11, Segmentation fault) while loading this model");
  expect("a crash while running is reported as such",
         guarded([](const ld::PhaseReporter& phase) {
           phase.enter(ld::Phase::Loading);
           phase.enter(ld::Phase::Running);
           return std::raise(SIGABRT);
         }),
         66, "while running this model");
  expect("a worker that exits passes its code through", guarded([](const ld::PhaseReporter&) { return 5; }), 5, "");
  std::cout << "crash_guard_check: " << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}
