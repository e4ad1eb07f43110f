// Segment: an RAII named POSIX shared-memory segment (Boost.Interprocess shared_memory_object +
// mapped_region) that starts with a common SegmentHeader.
//
// Every deltakv segment begins with the same 64-byte header: a magic, the layout version this
// build speaks, the kind of segment, its total size and the creator's pid (shm/PROTOCOL.md §2).
// The creator builds the body while the magic is still zero and then calls Publish(), which
// release-stores the magic; Open() waits (bounded) for the magic and then refuses any segment
// whose magic, layout version, kind or size disagree with this build, so a process built from
// a different layout never attaches to (and never corrupts) a segment it does not understand.
//
// Ownership: a Segment owns its mapping; moving transfers it; destruction unmaps. The name is
// unlinked on destruction only when `unlink_on_destroy` is set (the default for Create) and the
// name still refers to the object this Segment created (not to one another process created
// under the same name after removing it); the mapping stays valid for every process that still
// has it mapped after an unlink.
//
// Thread-safety: the object is not synchronized; the bytes it maps are shared with other
// processes and are accessed through the atomics of the structures laid out in them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace deltakv::shm {

// Layout version of every structure in shm/ (headers, control block, rings, arenas). Bump it on
// any change to a byte offset or meaning; processes built with different values refuse to attach.
inline constexpr uint32_t kLayoutVersion = 4;

// The 8 characters of `text` read as a little-endian u64 (how magics appear in a hex dump).
constexpr uint64_t MagicFromText(const char (&text)[9]) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(text[i]);
  return value;
}

inline constexpr uint64_t kSegmentMagic = MagicFromText("DKVSHM01");
static_assert(kSegmentMagic == 0x3130'4D48'5356'4B44ull);

enum class SegmentKind : uint32_t {
  kControl = 1,    // the sidecar's control block (shm/control_block.h)
  kPlanArena = 2,  // a per-sync, per-rank write plan (shm/plan_arena.h)
  kKvPool = 3,     // reserved for kvtier/
  kScratch = 100,  // free-form body; tests and tools
};

std::string_view SegmentKindName(SegmentKind kind);

// The first 64 bytes of every segment. `magic` is written last (release) by Publish().
struct SegmentHeader {
  std::atomic<uint64_t> magic;   // kSegmentMagic once published; 0 while being built
  uint32_t layout_version;       // kLayoutVersion of the creator
  uint32_t kind;                 // SegmentKind
  uint64_t size;                 // total bytes of the segment, this header included
  uint32_t header_size;          // sizeof(SegmentHeader) == 64
  uint32_t creator_pid;          // pid of the process that created the segment
  uint64_t created_realtime_ns;  // CLOCK_REALTIME at creation; informational
  // 0 while the segment's name refers to it; set to 1 (release) before the name is removed or
  // handed to a new segment (Retire), so processes that keep it mapped can tell it is gone.
  std::atomic<uint64_t> retired;
  uint8_t reserved[16];  // zero
};
static_assert(sizeof(SegmentHeader) == 64);
static_assert(offsetof(SegmentHeader, layout_version) == 8);
static_assert(offsetof(SegmentHeader, kind) == 12);
static_assert(offsetof(SegmentHeader, size) == 16);
static_assert(offsetof(SegmentHeader, header_size) == 24);
static_assert(offsetof(SegmentHeader, creator_pid) == 28);
static_assert(offsetof(SegmentHeader, created_realtime_ns) == 32);
static_assert(offsetof(SegmentHeader, retired) == 40);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint64_t>) == 8);

enum class IfExists {
  kFail,     // Create returns FailedPrecondition when the name exists
  kReplace,  // the caller has decided the existing segment is stale: retire and unlink it,
             // create anew
};

struct CreateOptions {
  IfExists if_exists = IfExists::kFail;
  bool unlink_on_destroy = true;  // remove the name when the owning Segment is destroyed
  unsigned mode = 0600;           // permission bits of the new segment
};

struct OpenOptions {
  // How long Open waits for a segment that exists but is not yet published (size 0 or magic 0)
  // before giving up with FailedPrecondition.
  std::chrono::milliseconds init_timeout{1000};
};

class Segment {
 public:
  Segment();
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  // Creates `name` with `size` zero bytes (size >= 64), maps it read-write and writes the
  // header with magic 0: the segment is not visible to Open until Publish(). InvalidArgument
  // for a bad name or size; FailedPrecondition if the name exists and `if_exists` is kFail;
  // IoError if the system refuses. On failure nothing is left behind.
  static StatusOr<Segment> Create(const std::string& name, uint64_t size, SegmentKind kind,
                                  const CreateOptions& options = {});

  // Opens and maps an existing, published segment and validates its header against this build
  // and `kind`. NotFound if absent; FailedPrecondition if it stays unpublished past
  // `init_timeout` or was built from another layout version (the message names both versions);
  // DataLoss for a wrong magic, kind, header size or a size that disagrees with the object.
  // The returned Segment never unlinks on destruction.
  static StatusOr<Segment> Open(const std::string& name, SegmentKind kind,
                                const OpenOptions& options = {});

  // Removes the name (retiring the segment it named first). OK if it was removed, NotFound if
  // it did not exist, IoError otherwise.
  static Status Unlink(const std::string& name);
  // Sets `retired` in the header of the published segment `name` names, if any: the processes
  // that have it mapped see it retired. Does nothing for a missing, unpublished or foreign
  // object. Every removal of a name by this class (Unlink, UnlinkWithPrefix, Create with
  // kReplace, destruction with unlink_on_destroy) retires the segment first.
  static void Retire(const std::string& name);
  static bool Exists(const std::string& name);
  // Names of the segments (Linux: entries of /dev/shm) that start with `prefix`, sorted.
  static std::vector<std::string> ListWithPrefix(std::string_view prefix);
  // Unlinks every segment whose name starts with `prefix` (InvalidArgument for an empty prefix).
  // Returns how many were removed.
  static StatusOr<size_t> UnlinkWithPrefix(std::string_view prefix);
  // OK for 1-200 characters from [A-Za-z0-9._-], not starting with '.'; InvalidArgument else.
  static Status ValidateName(std::string_view name);

  // Release-stores the magic: every byte written before this call is visible to a process that
  // Open()s the segment afterwards. REQUIRES: created by this object.
  void Publish();

  bool valid() const { return data_ != nullptr; }
  const std::string& name() const { return name_; }
  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  SegmentHeader* header() const { return reinterpret_cast<SegmentHeader*>(data_); }
  std::span<uint8_t> bytes() const { return {data_, static_cast<size_t>(size_)}; }

  // True once the segment was retired: its name was removed or now names another segment.
  bool retired() const { return header()->retired.load(std::memory_order_acquire) != 0; }

  // Pointer to `length` bytes at `offset`, or nullptr if they are not inside the segment.
  uint8_t* At(uint64_t offset, uint64_t length) const;

  void set_unlink_on_destroy(bool unlink) { unlink_on_destroy_ = unlink; }

 private:
  struct Mapping;  // the Boost objects; kept out of this header

  void Reset();

  std::unique_ptr<Mapping> mapping_;
  std::string name_;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool unlink_on_destroy_ = false;
};

}  // namespace deltakv::shm
