#include "shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <thread>
#include <utility>

namespace deltakv::shm {
namespace bip = boost::interprocess;

namespace {

// Where Linux keeps POSIX shared memory objects; used only to list them by prefix.
constexpr const char* kShmDirectory = "/dev/shm";

std::string Quoted(std::string_view name) { return "'" + std::string(name) + "'"; }

uint64_t RealtimeNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

struct Segment::Mapping {
  bip::mapped_region region;
  // The object this segment created (st_dev, st_ino; 0 when unknown): its name is unlinked on
  // destruction only while it still names this object, not one a later process created under
  // the same name after removing this one (a sidecar that replaced a stopped one, say).
  uint64_t device = 0;
  uint64_t inode = 0;
};

namespace {

// True if `name` names the object (device, inode) now; false if it names another or none.
bool NamesObject(const std::string& name, uint64_t device, uint64_t inode) {
  const int fd = shm_open(("/" + name).c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return false;
  struct stat st {};
  const bool same = fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_dev) == device &&
                    static_cast<uint64_t>(st.st_ino) == inode;
  close(fd);
  return same;
}

}  // namespace

std::string_view SegmentKindName(SegmentKind kind) {
  switch (kind) {
    case SegmentKind::kControl:
      return "control";
    case SegmentKind::kPlanArena:
      return "plan-arena";
    case SegmentKind::kKvPool:
      return "kv-pool";
    case SegmentKind::kScratch:
      return "scratch";
  }
  return "unknown";
}

Segment::Segment() = default;
Segment::~Segment() { Reset(); }

Segment::Segment(Segment&& other) noexcept
    : mapping_(std::move(other.mapping_)),
      name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      unlink_on_destroy_(std::exchange(other.unlink_on_destroy_, false)) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    Reset();
    mapping_ = std::move(other.mapping_);
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    unlink_on_destroy_ = std::exchange(other.unlink_on_destroy_, false);
  }
  return *this;
}

void Segment::Reset() {
  // (No mapping yet: a Create that failed half way removes what it made.)
  if (unlink_on_destroy_ && !name_.empty() &&
      (mapping_ == nullptr || mapping_->inode == 0 ||
       NamesObject(name_, mapping_->device, mapping_->inode))) {
    if (data_ != nullptr) header()->retired.store(1, std::memory_order_release);
    bip::shared_memory_object::remove(name_.c_str());
  }
  mapping_.reset();
  data_ = nullptr;
  size_ = 0;
  unlink_on_destroy_ = false;
  name_.clear();
}

Status Segment::ValidateName(std::string_view name) {
  if (name.empty() || name.size() > 200) {
    return InvalidArgument("shm segment name " + Quoted(name) + " must be 1-200 characters");
  }
  if (name[0] == '.') {
    return InvalidArgument("shm segment name " + Quoted(name) + " must not start with '.'");
  }
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) {
      return InvalidArgument("shm segment name " + Quoted(name) +
                             " may only contain [A-Za-z0-9._-]");
    }
  }
  return Status::Ok();
}

StatusOr<Segment> Segment::Create(const std::string& name, uint64_t size, SegmentKind kind,
                                  const CreateOptions& options) {
  RETURN_IF_ERROR(ValidateName(name));
  if (size < sizeof(SegmentHeader)) {
    return InvalidArgument("shm segment " + Quoted(name) + ": size " + std::to_string(size) +
                           " is smaller than the 64-byte header");
  }
  if (options.if_exists == IfExists::kReplace) {
    Retire(name);
    bip::shared_memory_object::remove(name.c_str());
  }

  Segment segment;
  try {
    bip::permissions perm(options.mode);
    bip::shared_memory_object object(bip::create_only, name.c_str(), bip::read_write, perm);
    // From here on a failure must not leave the name behind.
    segment.name_ = name;
    segment.unlink_on_destroy_ = true;
    object.truncate(static_cast<bip::offset_t>(size));
    // Reserve the pages now: a shared-memory filesystem that is full would otherwise show up
    // as SIGBUS at the first write to an unbacked page, in whichever process touches it.
    int rc;
    do {
      rc = posix_fallocate(object.get_mapping_handle().handle, 0, static_cast<off_t>(size));
    } while (rc == EINTR);
    if (rc == ENOSPC || rc == EDQUOT) {
      return ResourceExhausted("shm segment " + Quoted(name) + ": no space left in shared memory " +
                               "(/dev/shm): need " + std::to_string(size) + " bytes");
    }
    if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
      return IoError("shm segment " + Quoted(name) + ": reserve " + std::to_string(size) +
                     " bytes: " + std::strerror(rc));
    }
    auto mapping = std::make_unique<Mapping>();
    mapping->region = bip::mapped_region(object, bip::read_write, 0, size);
    struct stat st {};
    if (fstat(object.get_mapping_handle().handle, &st) == 0) {
      mapping->device = static_cast<uint64_t>(st.st_dev);
      mapping->inode = static_cast<uint64_t>(st.st_ino);
    }
    segment.data_ = static_cast<uint8_t*>(mapping->region.get_address());
    segment.size_ = size;
    segment.mapping_ = std::move(mapping);
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::already_exists_error) {
      return FailedPrecondition("shm segment " + Quoted(name) + " already exists");
    }
    return IoError("shm segment " + Quoted(name) + ": create " + std::to_string(size) +
                   " bytes: " + e.what());
  }

  // A fresh object reads as zeros; construct the header in place with magic still 0.
  auto* header = new (segment.data_) SegmentHeader{};
  header->magic.store(0, std::memory_order_relaxed);
  header->layout_version = kLayoutVersion;
  header->kind = static_cast<uint32_t>(kind);
  header->size = size;
  header->header_size = sizeof(SegmentHeader);
  header->creator_pid = static_cast<uint32_t>(getpid());
  header->created_realtime_ns = RealtimeNs();
  segment.unlink_on_destroy_ = options.unlink_on_destroy;
  return segment;
}

void Segment::Publish() { header()->magic.store(kSegmentMagic, std::memory_order_release); }

StatusOr<Segment> Segment::Open(const std::string& name, SegmentKind kind,
                                const OpenOptions& options) {
  RETURN_IF_ERROR(ValidateName(name));
  const auto deadline = std::chrono::steady_clock::now() + options.init_timeout;
  auto past_deadline = [&] { return std::chrono::steady_clock::now() >= deadline; };
  const std::string what = "shm segment " + Quoted(name);

  Segment segment;
  try {
    bip::shared_memory_object object(bip::open_only, name.c_str(), bip::read_write);
    bip::offset_t object_size = 0;
    // The creator truncates right after creating; wait for that.
    for (;;) {
      if (!object.get_size(object_size)) return IoError(what + ": cannot read its size");
      if (object_size >= static_cast<bip::offset_t>(sizeof(SegmentHeader))) break;
      if (past_deadline()) {
        return FailedPrecondition(what + " is not initialized (size " +
                                  std::to_string(object_size) + ")");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    auto mapping = std::make_unique<Mapping>();
    mapping->region =
        bip::mapped_region(object, bip::read_write, 0, static_cast<size_t>(object_size));
    segment.data_ = static_cast<uint8_t*>(mapping->region.get_address());
    segment.size_ = static_cast<uint64_t>(object_size);
    segment.mapping_ = std::move(mapping);
    segment.name_ = name;
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::not_found_error) return NotFound(what + " does not exist");
    return IoError(what + ": open: " + e.what());
  }

  const SegmentHeader* header = segment.header();
  uint64_t magic = header->magic.load(std::memory_order_acquire);
  while (magic == 0) {
    if (past_deadline()) return FailedPrecondition(what + " was never published (magic is 0)");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    magic = header->magic.load(std::memory_order_acquire);
  }
  if (magic != kSegmentMagic) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(magic));
    return DataLoss(what + " has magic " + buf + ", not a deltakv segment");
  }
  if (header->layout_version != kLayoutVersion) {
    return FailedPrecondition(what + " has layout version " +
                              std::to_string(header->layout_version) + " but this build speaks " +
                              std::to_string(kLayoutVersion) + "; refusing to attach");
  }
  if (header->header_size != sizeof(SegmentHeader)) {
    return DataLoss(what + ": header size " + std::to_string(header->header_size) +
                    ", expected 64");
  }
  if (header->kind != static_cast<uint32_t>(kind)) {
    return DataLoss(what + " is a " +
                    std::string(SegmentKindName(static_cast<SegmentKind>(header->kind))) +
                    " segment (kind " + std::to_string(header->kind) + "), expected " +
                    std::string(SegmentKindName(kind)));
  }
  if (header->size != segment.size_) {
    return DataLoss(what + ": header says " + std::to_string(header->size) +
                    " bytes but the object has " + std::to_string(segment.size_));
  }
  return segment;
}

Status Segment::Unlink(const std::string& name) {
  RETURN_IF_ERROR(ValidateName(name));
  if (!Exists(name)) return NotFound("shm segment " + Quoted(name) + " does not exist");
  Retire(name);
  if (!bip::shared_memory_object::remove(name.c_str())) {
    if (!Exists(name)) return NotFound("shm segment " + Quoted(name) + " does not exist");
    return IoError("shm segment " + Quoted(name) + ": unlink failed");
  }
  return Status::Ok();
}

bool Segment::Exists(const std::string& name) {
  if (!ValidateName(name).ok()) return false;
  try {
    bip::shared_memory_object object(bip::open_only, name.c_str(), bip::read_only);
    return true;
  } catch (const bip::interprocess_exception&) {
    return false;
  }
}

std::vector<std::string> Segment::ListWithPrefix(std::string_view prefix) {
  std::vector<std::string> names;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(kShmDirectory, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    std::string file = it->path().filename().string();
    if (file.starts_with(prefix) && ValidateName(file).ok()) names.push_back(std::move(file));
  }
  std::sort(names.begin(), names.end());
  return names;
}

StatusOr<size_t> Segment::UnlinkWithPrefix(std::string_view prefix) {
  if (prefix.empty()) return InvalidArgument("refusing to unlink every shm segment (empty prefix)");
  size_t removed = 0;
  for (const std::string& name : ListWithPrefix(prefix)) {
    Retire(name);
    if (bip::shared_memory_object::remove(name.c_str())) ++removed;
  }
  return removed;
}

void Segment::Retire(const std::string& name) {
  if (!ValidateName(name).ok()) return;
  const int fd = shm_open(("/" + name).c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return;
  struct stat st {};
  if (fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) >= sizeof(SegmentHeader)) {
    void* p = mmap(nullptr, sizeof(SegmentHeader), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
      auto* h = static_cast<SegmentHeader*>(p);
      if (h->magic.load(std::memory_order_acquire) == kSegmentMagic &&
          h->header_size == sizeof(SegmentHeader)) {
        h->retired.store(1, std::memory_order_release);
      }
      munmap(p, sizeof(SegmentHeader));
    }
  }
  close(fd);
}

uint8_t* Segment::At(uint64_t offset, uint64_t length) const {
  if (offset > size_ || length > size_ - offset) return nullptr;
  return data_ + offset;
}

}  // namespace deltakv::shm
