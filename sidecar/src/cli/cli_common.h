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

// Prints a JSON object as one line on stdout.
void PrintJson(const nlohmann::json& j);

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
