#include <lite_predictor/crash_guard.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

namespace lightweight_dispatch {

namespace {

constexpr int kFaultSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS};

std::atomic<Phase> current_phase{Phase::StartingUp};

// Everything the handler writes, composed before it is installed: the handler only reads it. Each message is
// a head, the signal's number and name, and a tail.
struct CrashMessages {
  std::string starting_head; // "lite_predictor: error: LibTorch crashed (signal "
  std::string model_head;    // the same, naming the model
  std::string starting_tail; // ") while starting up, before MODEL was read: ..."
  std::string loading_tail;  // ") while loading this model; ..."
  std::string running_tail;
  CrashExitCodes codes{};
};
CrashMessages messages;

// The main thread's handler stack: a stack overflow there leaves no room on its own stack.
alignas(16) char alternate_stack[64 * 1024];

const char* signal_name(int signal) {
  switch (signal) {
    case SIGSEGV: return "Segmentation fault";
    case SIGBUS: return "Bus error";
    case SIGILL: return "Illegal instruction";
    case SIGFPE: return "Floating point exception";
    case SIGABRT: return "Aborted";
    case SIGTRAP: return "Trace/breakpoint trap";
    case SIGSYS: return "Bad system call";
    default: return "Unknown signal";
  }
}

// write(2) of the whole of `text`, retried on EINTR and short writes: async-signal-safe.
void write_all(const char* text, size_t length) {
  while (length > 0) {
    const ssize_t written = write(STDERR_FILENO, text, length);
    if (written < 0 && errno == EINTR) {
      continue;
    }
    if (written <= 0) {
      return;
    }
    text += written;
    length -= static_cast<size_t>(written);
  }
}

void write_all(const char* text) {
  write_all(text, std::strlen(text));
}

void write_number(int value) {
  char digits[16];
  size_t length = 0;
  unsigned magnitude = value < 0 ? 0u - static_cast<unsigned>(value) : static_cast<unsigned>(value);
  do {
    digits[sizeof(digits) - 1 - length++] = static_cast<char>('0' + magnitude % 10);
    magnitude /= 10;
  } while (magnitude > 0 && length < sizeof(digits) - 1);
  if (value < 0) {
    digits[sizeof(digits) - 1 - length++] = '-';
  }
  write_all(digits + sizeof(digits) - length, length);
}

void report_crash_and_exit(int signal) {
  static std::atomic<bool> reporting{false};
  if (reporting.exchange(true)) {
    for (;;) {
      pause(); // another thread faulted too: the first one's report ends the process
    }
  }
  const Phase phase = current_phase.load(std::memory_order_relaxed);
  const std::string& head = phase == Phase::StartingUp ? messages.starting_head : messages.model_head;
  const std::string& tail = phase == Phase::StartingUp ? messages.starting_tail
      : phase == Phase::Loading                        ? messages.loading_tail
                                                       : messages.running_tail;
  write_all(head.data(), head.size());
  write_number(signal);
  write_all(", ");
  write_all(signal_name(signal));
  write_all(tail.data(), tail.size());
  _exit(phase == Phase::StartingUp ? messages.codes.while_starting
          : phase == Phase::Loading ? messages.codes.while_loading
                                    : messages.codes.while_running);
}

void install_handlers() {
  stack_t stack{};
  stack.ss_sp = alternate_stack;
  stack.ss_size = sizeof(alternate_stack);
  sigaltstack(&stack, nullptr); // without it, handlers run on the faulting stack
  struct sigaction action {};
  action.sa_handler = report_crash_and_exit;
  sigemptyset(&action.sa_mask);
  for (const int signal : kFaultSignals) {
    sigaddset(&action.sa_mask, signal);
  }
  // SA_RESETHAND: a fault inside the handler itself ends the process by the signal.
  action.sa_flags = SA_ONSTACK | SA_RESETHAND;
  for (const int signal : kFaultSignals) {
    sigaction(signal, &action, nullptr);
  }
}

} // namespace

void PhaseReporter::enter(Phase phase) const {
  current_phase.store(phase, std::memory_order_relaxed);
}

int run_guarded(
    const std::function<int(const PhaseReporter&)>& work,
    const std::string& model_path,
    CrashExitCodes codes,
    bool guarded) {
  if (guarded) {
    const std::string blame = " this model; the file is probably damaged or was not made by a compatible exporter\n";
    messages.starting_head = "lite_predictor: error: LibTorch crashed (signal ";
    messages.model_head = "lite_predictor: error: " + model_path + ": LibTorch crashed (signal ";
    messages.starting_tail = ") while starting up, before " + model_path +
        " was read: the runtime itself failed on this machine (its CPU detection or thread pool, for instance), "
        "not the model file\n";
    messages.loading_tail = ") while loading" + blame;
    messages.running_tail = ") while running" + blame;
    messages.codes = codes;
    install_handlers();
  }
  return work(PhaseReporter());
}

} // namespace lightweight_dispatch
