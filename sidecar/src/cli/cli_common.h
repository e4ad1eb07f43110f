// Shared pieces of the deltakv command-line tool: exit codes, error reporting, JSON output.
//
// Exit codes (documented in README.md and `deltakv --help`):
//   0  success
//   1  usage error (unknown command or option, missing argument)
//   2  bad input or verification failure (malformed file or manifest, wrong parent,
//      checksum mismatch, corrupt or truncated frame, output already exists)
//   3  environment failure (I/O error, internal error)
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace deltakv::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitEnvironment = 3;

int ExitCodeFor(const Status& s);

// Prints "deltakv <command>: error: <message>" to stderr (and, with json, an error object to
// stdout: {"ok": false, "error": {"code", "message"}} plus the fields of `extra`) and returns
// the exit code for `s`.
int ReportError(std::string_view command, const Status& s, bool json,
                const nlohmann::json& extra = nlohmann::json::object());

// Results go to stdout through PrintJson, PrintText and WriteStdout, which keep the error of
// the first write that failed (a full disk, /dev/full, a closed descriptor) for FinishStdout.
// Prints a JSON object as one line on stdout, and flushes it.
void PrintJson(const nlohmann::json& j);
void PrintText(const char* format, ...) __attribute__((format(printf, 1, 2)));
void WriteStdout(std::string_view text);
// Flushes stdout. When a write to it failed (through the functions above or any other way),
// prints "deltakv <command>: error: cannot write to stdout: <errno text>" on stderr and
// returns kExitEnvironment (or `rc`, when the command had already failed); else returns `rc`.
// main() calls it after every command.
int FinishStdout(std::string_view command, int rc);

// For commands that build an output under a temporary name: CatchInterrupts() installs
// handlers for SIGINT, SIGTERM and SIGHUP that set the returned flag, which the command's work
// checks (it then stops and removes what it wrote). DieIfInterrupted() then restores the
// caught signal's default action and raises it, so the process dies of it and a shell sees an
// interrupted command; it returns when no signal was caught.
const std::atomic<bool>* CatchInterrupts();
void DieIfInterrupted();

// "1.50 GiB", "12.0 MiB", "512 B".
std::string HumanBytes(uint64_t bytes);

// A usage-error check for a number option: a finite value in [lo, hi] ((lo, hi] with
// `lo_open`). CLI::Range lets NaN through.
CLI::Validator FiniteRange(double lo, double hi, bool lo_open = false);
// The most MiB a size option takes: MiB << 20 must fit 64 bits.
inline constexpr uint64_t kMaxMib = (uint64_t{1} << 44) - 1;
// A usage error for an empty value ("--version ''"), which would stand for no value at all.
CLI::Validator NonEmpty();
// The most worker threads --threads takes (each costs memory before any work is done).
inline constexpr unsigned kMaxThreads = 1024;
// Adds --threads to `cmd` for `*threads`: 0 (all CPUs) to kMaxThreads, a usage error above.
CLI::Option* AddThreadsOption(CLI::App* cmd, unsigned* threads);

// Registers each command; the callback stores the exit code in *rc.
void AddCheckpointCommands(CLI::App& app, int* rc);
void AddPublishCommand(CLI::App& app, int* rc);
void AddApplyCommand(CLI::App& app, int* rc);
void AddFrameCommands(CLI::App& app, int* rc);
void AddSidecarCommand(CLI::App& app, int* rc);
void AddTraceCommands(CLI::App& app, int* rc);
void AddBenchCommands(CLI::App& app, int* rc);
void AddPlanCommand(CLI::App& app, int* rc);
void AddVolumeCommands(CLI::App& app, int* rc);

}  // namespace deltakv::cli
