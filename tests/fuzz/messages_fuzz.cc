// Fuzzes the shared-memory message codec (shm/messages.h): arbitrary bytes are rejected with
// InvalidArgument or decoded into a message that re-encodes to the same bytes, and whose typed
// parser accepts it and rebuilds the same payload.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "shm/messages.h"

using namespace deltakv;
using namespace deltakv::shm;

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

// Make(Parse(m)) must give m's payload back.
void CheckTyped(const Message& m) {
  switch (m.type) {
    case MessageType::kPlan: {
      auto p = ParsePlan(m);
      Check(p.ok());
      auto back = MakePlan(m.sync_id, *p);
      Check(back.ok() && back->payload == m.payload);
      break;
    }
    case MessageType::kStaged: {
      auto s = ParseStaged(m);
      Check(s.ok() && s->part_index < s->part_count);
      auto back = MakeStaged(m.sync_id, *s);
      Check(back.ok() && back->payload == m.payload);
      break;
    }
    case MessageType::kVerified: {
      auto s = ParseVerified(m);
      Check(s.ok() && s->part_index < s->part_count);
      auto back = MakeVerified(m.sync_id, *s);
      Check(back.ok() && back->payload == m.payload);
      break;
    }
    case MessageType::kVerify: {
      auto v = ParseVerify(m);
      Check(v.ok() && MakeVerify(m.sync_id, *v).payload == m.payload);
      break;
    }
    case MessageType::kCommitted: {
      auto c = ParseCommitted(m);
      Check(c.ok());
      const auto again = MakeCommitted(m.sync_id, *c).payload;
      if (m.payload.size() == 16) {
        // The earlier 16-byte form: the same first fields, times unknown (0).
        Check(again.size() == 32 && std::equal(m.payload.begin(), m.payload.end(), again.begin()) &&
              c->pause_start_unix_ns == 0 && c->resume_unix_ns == 0);
      } else {
        Check(again == m.payload);
      }
      break;
    }
    case MessageType::kAbort:
    case MessageType::kAborted:
    case MessageType::kError: {
      auto t = ParseText(m);
      Check(t.ok() && t->size() <= kMaxMessageText);
      auto back = MakeText(m.type, m.sync_id, *t);
      Check(back.ok() && back->payload == m.payload);
      break;
    }
    case MessageType::kPing:
    case MessageType::kPong: {
      auto n = ParseNonce(m);
      Check(n.ok() && MakePing(*n).payload == m.payload);
      break;
    }
    case MessageType::kCommit:
      Check(m.payload.empty() && MakeCommit(m.sync_id).payload.empty());
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  auto m = DecodeMessage(in);
  if (!m.ok()) {
    Check(m.status().code() == StatusCode::kInvalidArgument);
    return 0;
  }
  Check(ValidatePayload(m->type, m->payload).ok());
  auto again = EncodeMessage(*m);
  Check(again.ok() && std::vector<uint8_t>(in.begin(), in.end()) == *again);
  CheckTyped(*m);
  return 0;
}
