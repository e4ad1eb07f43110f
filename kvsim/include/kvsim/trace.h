// Agentic request traces: the Weka/AgentX JSON format and the Mooncake JSONL format, read into
// one in-memory model that the replay (kvsim/replay.h) and the theoretical hit rate
// (kvsim/theoretical_hit.h) consume. The formats are specified in docs/TRACES.md.
//
// A Trace is one hash-id scope: the ids of its requests name 64- or 512-token blocks of prompt
// prefix, and equal ids at the same prefix position are equal content. A Weka trace is one
// session tree: a root conversation (the trace's own "n"/"s" requests in file order) and one
// child conversation per subagent entry, spawned when the root turn before it in the file ends
// and joined by the first later root turn that starts at or after the subagent's recorded end
// (none: a background subagent). A subagent entry with no root turn before it is dropped, as
// AgentX does. A Mooncake file is one Trace whose conversations are independent single-turn
// sessions (records in file order) sharing the file's hash scope.
//
// Times are seconds from the trace's start; a subagent's inner `t` values are converted to
// absolute ones at parse time (docs/TRACES.md says how the two conventions are told apart).
//
// Thread-safety: value types; the functions are stateless.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace deltakv::kvsim {

enum class TraceFormat : uint8_t {
  kWeka,      // Weka / AgentX JSON: one trace object per file, or one per line (.jsonl)
  kMooncake,  // Mooncake JSONL: one request per line
};
std::string_view TraceFormatName(TraceFormat format);

struct TraceRequest {
  double t_s = 0;              // start, seconds from the trace's start (absolute)
  uint64_t input_tokens = 0;   // prompt length (`in` / `input_length`)
  uint64_t output_tokens = 0;  // completion length (`out` / `output_length`)
  // One id per block_size tokens of the prompt, in prefix order. May cover fewer tokens than
  // input_tokens (Weka hashes only whole blocks) or end in a partial block (Mooncake).
  std::vector<uint64_t> hash_ids;
  double api_time_s = -1;    // recorded server time; -1 when the trace has none
  double think_time_s = -1;  // recorded client gap before the request; -1 when absent
  uint32_t line = 0;         // 1-based line of the file it was read from (0: unknown)
};

struct Conversation {
  std::string id;  // the trace id for the root; "<trace id>::sa:<agent_id>" for a subagent
  std::vector<TraceRequest> turns;
  // Children only (index > 0 in Trace::conversations): the root turn whose end spawns it, and
  // the root turn that waits for it to finish; -1 when the parent does not wait (background).
  // join_before > spawn_after when it is not -1.
  int32_t spawn_after = -1;
  int32_t join_before = -1;
  double spawn_t_s = 0;  // the subagent entry's `t`
  // The entry's recorded `duration_ms`; -1 when absent or null. The subagent's end is
  // spawn_t_s + duration_ms / 1000, or without it the latest inner t + api_time.
  double duration_ms = -1;
};

struct Trace {
  std::string id;
  std::string file;  // the path it was read from
  TraceFormat format = TraceFormat::kWeka;
  uint32_t block_size = 0;  // tokens per hash id (Weka: the trace's block_size; Mooncake: 512)
  uint64_t tool_tokens = 0;
  uint64_t system_tokens = 0;
  // Weka: [0] is the root, then the subagents in spawn order. Mooncake: one single-turn
  // conversation per record, in file order (sessions_independent).
  std::vector<Conversation> conversations;
  bool sessions_independent = false;  // Mooncake: each conversation is its own session
};

struct Corpus {
  std::vector<Trace> traces;  // in path order (a directory's files sorted by name)
  uint64_t requests() const;  // turns over all conversations of all traces
};

struct TraceLimits {
  uint64_t max_file_bytes = 4ull << 30;
  uint64_t max_tokens_per_request = 1ull << 24;
  uint64_t max_requests = 1ull << 24;  // per file
};

// Parses one Weka trace object (a whole .json file, or one line of a .jsonl file with
// `first_line` its line number). Each request's `line` is the line its object starts on.
// InvalidArgument naming `file`, the line of the offending record (and the column, for JSON
// syntax) and the field path for malformed JSON, an unknown field, a missing or mistyped
// field, a negative time or count, a block_size of 0, hash_id_scope other than "local", root
// turns out of time order, or a limit exceeded.
StatusOr<Trace> ParseWekaTrace(std::string_view text, std::string_view file,
                               const TraceLimits& limits = {}, uint32_t first_line = 1);

// Parses a Mooncake JSONL file. InvalidArgument naming `file` and the line for the same classes
// of error (unknown fields, missing fields, bad values, hash_ids not covering the input).
StatusOr<Trace> ParseMooncakeTrace(std::string_view text, std::string_view file,
                                   const TraceLimits& limits = {});

// Loads a file, or every *.json / *.jsonl file of a directory (sorted by name), as one corpus.
// The format of each file is told by its content (docs/TRACES.md). NotFound / IoError for
// unreadable paths, InvalidArgument for an empty directory or any malformed file (the first
// error, with its file and line).
StatusOr<Corpus> LoadCorpus(const std::string& path, const TraceLimits& limits = {});

// Writes a Weka trace as one JSON object (the format ParseWekaTrace reads back exactly).
std::string WriteWekaTrace(const Trace& trace);

}  // namespace deltakv::kvsim
