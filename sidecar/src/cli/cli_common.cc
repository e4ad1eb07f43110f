#include "cli/cli_common.h"

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "log/log.h"

namespace deltakv::cli {

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kIoError:
    case StatusCode::kInternal:
      return kExitEnvironment;
    default:
      return kExitBadInput;
  }
}

int ReportError(std::string_view command, const Status& s, bool json, const nlohmann::json& extra) {
  std::fprintf(stderr, "deltakv %.*s: error: %s\n", static_cast<int>(command.size()),
               command.data(), s.message().c_str());
  if (json) {
    nlohmann::json j = extra;
    j["ok"] = false;
    j["error"] = {{"code", std::string(StatusCodeName(s.code()))}, {"message", s.message()}};
    PrintJson(j);
  }
  return ExitCodeFor(s);
}

namespace {

int g_stdout_error = 0;  // errno of the first write to stdout that failed

// Keeps errno as the first failure's when `failed`. REQUIRES: errno was cleared before the write.
void NoteStdoutWrite(bool failed) {
  if (failed && g_stdout_error == 0) g_stdout_error = errno != 0 ? errno : EIO;
}

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_interrupt_signal{0};

void OnInterrupt(int sig) {
  g_interrupt_signal.store(sig);
  g_interrupted.store(true);
}

}  // namespace

void WriteStdout(std::string_view text) {
  errno = 0;
  NoteStdoutWrite(std::fwrite(text.data(), 1, text.size(), stdout) != text.size());
}

void PrintText(const char* format, ...) {
  va_list args;
  va_start(args, format);
  errno = 0;
  const int n = std::vprintf(format, args);
  va_end(args);
  NoteStdoutWrite(n < 0 || std::ferror(stdout) != 0);
}

void PrintJson(const nlohmann::json& j) {
  WriteStdout(log::JsonText(j) + "\n");
  errno = 0;
  NoteStdoutWrite(std::fflush(stdout) != 0);
}

int FinishStdout(std::string_view command, int rc) {
  errno = 0;
  NoteStdoutWrite(std::fflush(stdout) != 0);
  errno = 0;
  NoteStdoutWrite(std::cout.flush().fail());  // std::cout writes through stdout
  errno = 0;  // a failure seen only now (a write that did not go through the functions above)
  NoteStdoutWrite(std::ferror(stdout) != 0);
  if (g_stdout_error == 0) return rc;
  std::fprintf(stderr, "deltakv %.*s: error: cannot write to stdout: %s\n",
               static_cast<int>(command.size()), command.data(), std::strerror(g_stdout_error));
  return rc == kExitOk ? kExitEnvironment : rc;
}

const std::atomic<bool>* CatchInterrupts() {
  struct sigaction sa {};
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  return &g_interrupted;
}

void DieIfInterrupted() {
  const int sig = g_interrupt_signal.load();
  if (sig == 0) return;
  std::fflush(stdout);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

CLI::Validator FiniteRange(double lo, double hi, bool lo_open) {
  char range[96];
  std::snprintf(range, sizeof(range), "%s%g, %g]", lo_open ? "(" : "[", lo, hi);
  const std::string description = std::string("FLOAT in ") + range;
  return CLI::Validator(
      [lo, hi, lo_open, description](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        const bool parsed = !text.empty() && end == text.c_str() + text.size();
        if (!parsed || !std::isfinite(v) || v < lo || (lo_open && v == lo) || v > hi) {
          return "Value " + text + " is not a finite number in " + description.substr(9);
        }
        return std::string();
      },
      description);
}

CLI::Validator NonEmpty() {
  return CLI::Validator(
      [](std::string& text) {
        return text.empty() ? std::string("Value is empty") : std::string();
      },
      "");
}

CLI::Option* AddThreadsOption(CLI::App* cmd, unsigned* threads) {
  return cmd
      ->add_option("--threads", *threads,
                   "Worker threads, at most " + std::to_string(kMaxThreads) + " (0 = all CPUs)")
      ->check(CLI::Range(0u, kMaxThreads));
}

std::string HumanBytes(uint64_t bytes) {
  char buf[64];
  double b = static_cast<double>(bytes);
  if (bytes >= (1ull << 30))
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / (1ull << 30));
  else if (bytes >= (1ull << 20))
    std::snprintf(buf, sizeof(buf), "%.2f MiB", b / (1ull << 20));
  else if (bytes >= (1ull << 10))
    std::snprintf(buf, sizeof(buf), "%.2f KiB", b / (1ull << 10));
  else
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

}  // namespace deltakv::cli
