#include "shm/messages.h"

#include <algorithm>
#include <cstdio>

#include "shm/segment.h"

namespace deltakv::shm {
namespace {

constexpr uint32_t kAdlerModulus = 65521;
constexpr size_t kPlanFixedBytes = 16;

// Little-endian writers and a bounds-checked reader; no struct is ever memcpy'd.
void PutU32(std::vector<uint8_t>* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutU64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

std::string TypeLabel(MessageType type) { return std::string(MessageTypeName(type)) + " message"; }

bool IsKnownType(uint32_t type) {
  return type >= static_cast<uint32_t>(MessageType::kPing) &&
         type <= static_cast<uint32_t>(MessageType::kVerified);
}

Status ExpectSize(MessageType type, std::span<const uint8_t> payload, size_t size) {
  if (payload.size() != size) {
    return InvalidArgument(TypeLabel(type) + ": payload is " + std::to_string(payload.size()) +
                           " bytes, expected " + std::to_string(size));
  }
  return Status::Ok();
}

Status ValidatePlan(std::span<const uint8_t> p) {
  if (p.size() < kPlanFixedBytes) {
    return InvalidArgument("plan message: payload of " + std::to_string(p.size()) +
                           " bytes is shorter than its 16-byte fixed part");
  }
  const uint32_t name_length = GetU32(p.data() + 8);
  if ((GetU32(p.data() + 12) & ~kPlanMore) != 0) {
    return InvalidArgument("plan message: unknown flag bits " + std::to_string(GetU32(p.data() + 12)));
  }
  if (name_length != p.size() - kPlanFixedBytes) {
    return InvalidArgument("plan message: name length " + std::to_string(name_length) +
                           " disagrees with the " + std::to_string(p.size() - kPlanFixedBytes) +
                           " bytes that follow");
  }
  std::string_view name(reinterpret_cast<const char*>(p.data() + kPlanFixedBytes), name_length);
  return Segment::ValidateName(name).WithPrefix("plan message: arena name");
}

// The entry flags each report type allows.
Status CheckEntryFlags(MessageType type, const std::string& label, uint32_t flags,
                       uint32_t entry) {
  bool ok;
  if (type == MessageType::kStaged) {
    ok = (flags & ~StagedEntry::kKnownFlags) == 0;
  } else {
    const uint32_t kind = VerifiedEntry::Kind(flags);
    ok = kind <= VerifiedEntry::kReplicaRef && (flags & 0xFFFCu) == 0 &&
         (kind == VerifiedEntry::kReplicaRef || VerifiedEntry::Holder(flags) == 0);
  }
  if (ok) return Status::Ok();
  return InvalidArgument(label + ": entry " + std::to_string(entry) + ": unknown flags " +
                         Hex32(flags));
}

Status ValidateReport(MessageType type, std::span<const uint8_t> p) {
  const std::string label = type == MessageType::kStaged ? "staged message" : "verified message";
  if (p.size() < kStagedHeaderBytes) {
    return InvalidArgument(label + ": payload of " + std::to_string(p.size()) +
                           " bytes is shorter than its 24-byte header");
  }
  const uint32_t count = GetU32(p.data());
  const uint32_t part_index = GetU32(p.data() + 4);
  const uint32_t part_count = GetU32(p.data() + 8);
  if (GetU32(p.data() + 12) != 0) return InvalidArgument(label + ": reserved field not zero");
  if (part_count == 0 || part_index >= part_count) {
    return InvalidArgument(label + ": part " + std::to_string(part_index) + " of " +
                           std::to_string(part_count));
  }
  // count <= 2^32 - 1, so the product cannot overflow 64 bits.
  if (p.size() - kStagedHeaderBytes != uint64_t{count} * kStagedEntryBytes) {
    return InvalidArgument(label + ": " + std::to_string(count) + " entries need " +
                           std::to_string(uint64_t{count} * kStagedEntryBytes) + " bytes, have " +
                           std::to_string(p.size() - kStagedHeaderBytes));
  }
  for (uint32_t i = 0; i < count; ++i) {
    const uint8_t* e = p.data() + kStagedHeaderBytes + size_t{i} * kStagedEntryBytes;
    const uint32_t s1 = GetU32(e + 4);
    const uint32_t s2 = GetU32(e + 8);
    const uint32_t flags = GetU32(e + 12);
    if (s1 >= kAdlerModulus || s2 >= kAdlerModulus) {
      return InvalidArgument(label + ": entry " + std::to_string(i) + " (tensor " +
                             std::to_string(GetU32(e)) + "): sums " + std::to_string(s1) + "/" +
                             std::to_string(s2) + " not reduced mod 65521");
    }
    RETURN_IF_ERROR(CheckEntryFlags(type, label, flags, i));
  }
  return Status::Ok();
}

Status ValidateText(MessageType type, std::span<const uint8_t> p) {
  if (p.size() > kMaxMessageText) {
    return InvalidArgument(TypeLabel(type) + ": text of " + std::to_string(p.size()) +
                           " bytes exceeds " + std::to_string(kMaxMessageText));
  }
  return Status::Ok();
}

Status ExpectType(const Message& m, MessageType type) {
  if (m.type != type) {
    return InvalidArgument("expected a " + TypeLabel(type) + ", got a " + TypeLabel(m.type));
  }
  return ValidatePayload(m.type, m.payload);
}

Message MakeNonce(MessageType type, uint64_t nonce) {
  Message m{type, 0, {}};
  PutU64(&m.payload, nonce);
  return m;
}

}  // namespace

std::string_view MessageTypeName(MessageType type) {
  switch (type) {
    case MessageType::kPing:
      return "PING";
    case MessageType::kPong:
      return "PONG";
    case MessageType::kPlan:
      return "PLAN";
    case MessageType::kStaged:
      return "STAGED";
    case MessageType::kCommit:
      return "COMMIT";
    case MessageType::kAbort:
      return "ABORT";
    case MessageType::kCommitted:
      return "COMMITTED";
    case MessageType::kAborted:
      return "ABORTED";
    case MessageType::kError:
      return "ERROR";
    case MessageType::kVerify:
      return "VERIFY";
    case MessageType::kVerified:
      return "VERIFIED";
  }
  return "UNKNOWN";
}

Status ValidatePayload(MessageType type, std::span<const uint8_t> payload) {
  if (payload.size() > kMaxMessagePayload) {
    return InvalidArgument(TypeLabel(type) + ": payload of " + std::to_string(payload.size()) +
                           " bytes exceeds " + std::to_string(kMaxMessagePayload));
  }
  switch (type) {
    case MessageType::kPing:
    case MessageType::kPong:
      return ExpectSize(type, payload, 8);
    case MessageType::kPlan:
      return ValidatePlan(payload);
    case MessageType::kStaged:
    case MessageType::kVerified:
      return ValidateReport(type, payload);
    case MessageType::kVerify:
      RETURN_IF_ERROR(ExpectSize(type, payload, kVerifyPayloadBytes));
      if ((GetU32(payload.data()) & ~kVerifyScrub) != 0 || GetU32(payload.data() + 4) != 0) {
        return InvalidArgument("verify message: unknown flag bits or nonzero reserved field");
      }
      return Status::Ok();
    case MessageType::kCommit:
      return ExpectSize(type, payload, 0);
    case MessageType::kCommitted:
      if (payload.size() != 16 && payload.size() != 32) {  // 16: without the pause times
        return InvalidArgument(TypeLabel(type) + ": payload is " +
                               std::to_string(payload.size()) + " bytes, expected 16 or 32");
      }
      return Status::Ok();
    case MessageType::kAbort:
    case MessageType::kAborted:
    case MessageType::kError:
      return ValidateText(type, payload);
  }
  return InvalidArgument("unknown message type " + std::to_string(static_cast<uint32_t>(type)));
}

StatusOr<std::vector<uint8_t>> EncodeMessage(const Message& message) {
  RETURN_IF_ERROR(ValidatePayload(message.type, message.payload));
  std::vector<uint8_t> out;
  out.reserve(kMessageHeaderBytes + message.payload.size());
  PutU32(&out, static_cast<uint32_t>(message.type));
  PutU32(&out, static_cast<uint32_t>(message.payload.size()));
  PutU64(&out, message.sync_id);
  out.insert(out.end(), message.payload.begin(), message.payload.end());
  return out;
}

StatusOr<Message> DecodeMessage(std::span<const uint8_t> bytes) {
  if (bytes.size() < kMessageHeaderBytes) {
    return InvalidArgument("message of " + std::to_string(bytes.size()) +
                           " bytes is shorter than its 16-byte header");
  }
  const uint32_t type = GetU32(bytes.data());
  const uint32_t length = GetU32(bytes.data() + 4);
  if (!IsKnownType(type)) return InvalidArgument("unknown message type " + std::to_string(type));
  if (length > kMaxMessagePayload) {
    return InvalidArgument("message payload length " + std::to_string(length) + " exceeds " +
                           std::to_string(kMaxMessagePayload));
  }
  if (length != bytes.size() - kMessageHeaderBytes) {
    return InvalidArgument(
        "message payload length " + std::to_string(length) + " disagrees with the " +
        std::to_string(bytes.size() - kMessageHeaderBytes) + " bytes that follow the header");
  }
  Message m;
  m.type = static_cast<MessageType>(type);
  m.sync_id = GetU64(bytes.data() + 8);
  m.payload.assign(bytes.begin() + kMessageHeaderBytes, bytes.end());
  RETURN_IF_ERROR(ValidatePayload(m.type, m.payload));
  return m;
}

StatusOr<Message> MakePlan(uint64_t sync_id, const PlanRef& plan) {
  RETURN_IF_ERROR(Segment::ValidateName(plan.arena_name).WithPrefix("plan message: arena name"));
  Message m{MessageType::kPlan, sync_id, {}};
  PutU64(&m.payload, plan.generation);
  if ((plan.flags & ~kPlanMore) != 0) return InvalidArgument("plan message: unknown flag bits");
  PutU32(&m.payload, static_cast<uint32_t>(plan.arena_name.size()));
  PutU32(&m.payload, plan.flags);
  m.payload.insert(m.payload.end(), plan.arena_name.begin(), plan.arena_name.end());
  return m;
}

StatusOr<PlanRef> ParsePlan(const Message& message) {
  RETURN_IF_ERROR(ExpectType(message, MessageType::kPlan));
  const uint8_t* p = message.payload.data();
  PlanRef plan;
  plan.generation = GetU64(p);
  plan.flags = GetU32(p + 12);
  plan.arena_name.assign(reinterpret_cast<const char*>(p + kPlanFixedBytes),
                         message.payload.size() - kPlanFixedBytes);
  return plan;
}

namespace {

StatusOr<Message> MakeReport(MessageType type, uint64_t sync_id, const StagedReport& report) {
  if (report.entries.size() > kMaxStagedEntries) {
    return InvalidArgument(TypeLabel(type) + ": " + std::to_string(report.entries.size()) +
                           " entries exceed " + std::to_string(kMaxStagedEntries) +
                           " per message; split the report into parts");
  }
  Message m{type, sync_id, {}};
  m.payload.reserve(kStagedHeaderBytes + report.entries.size() * kStagedEntryBytes);
  PutU32(&m.payload, static_cast<uint32_t>(report.entries.size()));
  PutU32(&m.payload, report.part_index);
  PutU32(&m.payload, report.part_count);
  PutU32(&m.payload, 0);
  PutU64(&m.payload, report.changed_bytes);
  for (const StagedEntry& e : report.entries) {
    PutU32(&m.payload, e.tensor_index);
    PutU32(&m.payload, e.s1);
    PutU32(&m.payload, e.s2);
    PutU32(&m.payload, e.flags);
  }
  RETURN_IF_ERROR(ValidateReport(type, m.payload));
  return m;
}

StatusOr<StagedReport> ParseReport(const Message& message, MessageType type) {
  RETURN_IF_ERROR(ExpectType(message, type));
  const uint8_t* p = message.payload.data();
  StagedReport report;
  const uint32_t count = GetU32(p);
  report.part_index = GetU32(p + 4);
  report.part_count = GetU32(p + 8);
  report.changed_bytes = GetU64(p + 16);
  report.entries.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    const uint8_t* e = p + kStagedHeaderBytes + size_t{i} * kStagedEntryBytes;
    report.entries[i] = {GetU32(e), GetU32(e + 4), GetU32(e + 8), GetU32(e + 12)};
  }
  return report;
}

}  // namespace

StatusOr<Message> MakeStaged(uint64_t sync_id, const StagedReport& report) {
  return MakeReport(MessageType::kStaged, sync_id, report);
}
StatusOr<StagedReport> ParseStaged(const Message& message) {
  return ParseReport(message, MessageType::kStaged);
}
StatusOr<Message> MakeVerified(uint64_t job_id, const StagedReport& report) {
  return MakeReport(MessageType::kVerified, job_id, report);
}
StatusOr<StagedReport> ParseVerified(const Message& message) {
  return ParseReport(message, MessageType::kVerified);
}

Message MakeVerify(uint64_t job_id, const VerifyRequest& request) {
  Message m{MessageType::kVerify, job_id, {}};
  PutU32(&m.payload, request.flags & kVerifyScrub);
  PutU32(&m.payload, 0);
  PutU64(&m.payload, request.rate_bytes_per_s);
  return m;
}

StatusOr<VerifyRequest> ParseVerify(const Message& message) {
  RETURN_IF_ERROR(ExpectType(message, MessageType::kVerify));
  return VerifyRequest{GetU32(message.payload.data()), GetU64(message.payload.data() + 8)};
}

Message MakeCommitted(uint64_t sync_id, const CommittedReport& report) {
  Message m{MessageType::kCommitted, sync_id, {}};
  PutU64(&m.payload, report.live_version);
  PutU64(&m.payload, report.pause_us);
  PutU64(&m.payload, static_cast<uint64_t>(report.pause_start_unix_ns));
  PutU64(&m.payload, static_cast<uint64_t>(report.resume_unix_ns));
  return m;
}

StatusOr<CommittedReport> ParseCommitted(const Message& message) {
  RETURN_IF_ERROR(ExpectType(message, MessageType::kCommitted));
  RETURN_IF_ERROR(ValidatePayload(MessageType::kCommitted, message.payload));
  CommittedReport r{GetU64(message.payload.data()), GetU64(message.payload.data() + 8)};
  if (message.payload.size() == 32) {
    r.pause_start_unix_ns = static_cast<int64_t>(GetU64(message.payload.data() + 16));
    r.resume_unix_ns = static_cast<int64_t>(GetU64(message.payload.data() + 24));
  }
  return r;
}

StatusOr<Message> MakeText(MessageType type, uint64_t sync_id, std::string_view text) {
  if (type != MessageType::kAbort && type != MessageType::kAborted && type != MessageType::kError) {
    return InvalidArgument(TypeLabel(type) + " does not carry text");
  }
  text = text.substr(0, std::min<size_t>(text.size(), kMaxMessageText));
  return Message{type, sync_id, std::vector<uint8_t>(text.begin(), text.end())};
}

StatusOr<std::string> ParseText(const Message& message) {
  if (message.type != MessageType::kAbort && message.type != MessageType::kAborted &&
      message.type != MessageType::kError) {
    return InvalidArgument(TypeLabel(message.type) + " does not carry text");
  }
  RETURN_IF_ERROR(ValidatePayload(message.type, message.payload));
  return std::string(message.payload.begin(), message.payload.end());
}

Message MakeCommit(uint64_t sync_id) { return Message{MessageType::kCommit, sync_id, {}}; }
Message MakePing(uint64_t nonce) { return MakeNonce(MessageType::kPing, nonce); }
Message MakePong(uint64_t nonce) { return MakeNonce(MessageType::kPong, nonce); }

StatusOr<uint64_t> ParseNonce(const Message& message) {
  if (message.type != MessageType::kPing && message.type != MessageType::kPong) {
    return InvalidArgument(TypeLabel(message.type) + " does not carry a nonce");
  }
  RETURN_IF_ERROR(ValidatePayload(message.type, message.payload));
  return GetU64(message.payload.data());
}

}  // namespace deltakv::shm
