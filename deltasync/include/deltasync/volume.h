// Sealed volumes: named, versioned sets of files in a content-addressed store.
//
// A volume NS/NAME holds versions. Push commits a directory as a new version and seals it: the
// version is named by the sha256 of its canonical manifest (`NS/NAME@sha256:<64 hex>`) and never
// changes. Tags (`NS/NAME:TAG`) are mutable names for versions. File contents are cut into
// chunks (tensor boundaries for safetensors files, content-defined elsewhere), each stored once
// under the sha256 of its bytes. A removed version stays restorable for a retention window;
// gc deletes only chunks that no live version, no version in its window and no push in flight
// needs. deltasync/VOLUME.md is the format spec: object names, byte rules, the protocol between
// pushes and gc, and test vectors.
//
// Ownership: a Volumes object borrows its VolumeStore, which must outlive it.
// Thread-safety: VolumeStore implementations and Volumes are safe to call from several threads
// and processes at once on the same store; the protocol in VOLUME.md keeps concurrent pushes,
// tag moves, removes, restores and gc consistent.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace deltakv::deltasync {

class FileSource;        // deltasync/volume_source.h
struct PushFromOptions;  // deltasync/volume_source.h

// ---------------------------------------------------------------------------------------------
// References.

// `NS/NAME@sha256:<64 lowercase hex>` (a sealed version) or `NS/NAME:TAG`.
// NS and NAME match [a-z0-9][a-z0-9._-]* and are at most 128 characters; TAG matches
// [A-Za-z0-9_][A-Za-z0-9._-]{0,127}.
struct VolumeRef {
  std::string ns;
  std::string name;
  std::string digest;  // 64 lowercase hex digits, or empty for a tag reference
  std::string tag;     // empty for a digest reference
  bool is_digest() const { return !digest.empty(); }
  // Returns the text form that ParseVolumeRef accepts.
  std::string ToString() const;
};

// Parses a reference. InvalidArgument naming the reference and the part that is wrong
// (missing '/', bad NS or NAME character or length, bad tag, digest that is not
// "sha256:" + 64 lowercase hex digits).
StatusOr<VolumeRef> ParseVolumeRef(std::string_view text);

// OK if `ns`, `name` or `tag` satisfies the rules above; otherwise InvalidArgument.
Status ValidateVolumeName(std::string_view what, std::string_view name);
Status ValidateVolumeTag(std::string_view tag);

// ---------------------------------------------------------------------------------------------
// The store.

// An object with the version token that a conditional write must name to replace it.
struct VersionedObject {
  std::string data;
  std::string generation;  // opaque: a counter in the directory store, an ETag in S3
};

// A flat namespace of objects named by '/'-separated keys ("chunks/sha256/ab/ab12...").
// Keys are relative, have no empty, "." or ".." components, and no component starting with
// '.'. Every write is atomic: a reader sees the old object, the new one, or none, never a part.
//
// Two kinds of object: plain objects (Put, Get, PutIfAbsent) and versioned objects (small
// mutable records written only with PutIfGeneration and read only with GetVersioned). The
// versioned calls map onto S3 conditional requests: GetVersioned returns the ETag,
// PutIfGeneration(key, data, etag) is PUT with If-Match, and PutIfGeneration(key, data, "")
// and PutIfAbsent are PUT with If-None-Match: *. A precondition that does not hold is
// FailedPrecondition (S3's 412). Exists, Size, List and Delete work on both kinds.
//
// Every call must see the effects of every call that completed before it began (S3 is strongly
// consistent in this sense); the protocol between pushes and gc relies on it.
//
// Errors: NotFound (no such object), IoError (the store refused or could not be reached),
// ResourceExhausted (object above the caller's cap), InvalidArgument (bad key).
class VolumeStore {
 public:
  virtual ~VolumeStore() = default;
  // Writes a plain object, replacing any old one.
  virtual Status Put(const std::string& key, std::span<const uint8_t> data) = 0;
  // Writes a plain object only if no object has this key; FailedPrecondition if one does.
  virtual Status PutIfAbsent(const std::string& key, std::span<const uint8_t> data) = 0;
  // Returns a plain object; ResourceExhausted if it is larger than max_bytes.
  virtual StatusOr<std::string> Get(const std::string& key, uint64_t max_bytes) = 0;
  virtual StatusOr<bool> Exists(const std::string& key) = 0;
  // Returns the stored size of the object in bytes.
  virtual StatusOr<uint64_t> Size(const std::string& key) = 0;
  // Returns every key starting with `prefix` (a string prefix, not only whole components),
  // sorted by bytes.
  virtual StatusOr<std::vector<std::string>> List(const std::string& prefix) = 0;
  // Deletes an object; OK if it did not exist.
  virtual Status Delete(const std::string& key) = 0;
  // Returns a versioned object with its generation.
  virtual StatusOr<VersionedObject> GetVersioned(const std::string& key, uint64_t max_bytes) = 0;
  // Writes a versioned object if its current generation is `expected`, or if it does not exist
  // and `expected` is empty. Returns the new generation. FailedPrecondition naming the key and
  // both generations if the condition does not hold; nothing is written then.
  virtual StatusOr<std::string> PutIfGeneration(const std::string& key,
                                                std::span<const uint8_t> data,
                                                const std::string& expected) = 0;
  // "dir:///srv/volumes", for messages.
  virtual std::string Describe() const = 0;
  // Removes the temporary files of writes that never finished (a writer killed mid-write) last
  // changed before `before_unix`, and returns how many it removed. A store without such files
  // (object stores write whole objects) has nothing to do.
  virtual StatusOr<uint64_t> RemoveAbandonedTemporaries(int64_t before_unix) {
    (void)before_unix;
    return uint64_t{0};
  }
};

// A store in a local directory (created if missing, unless `create` is false): one file per
// key. Writes go to a
// temporary file in the same directory, are fsynced and renamed into place (the directory is
// fsynced too); PutIfAbsent publishes with link(2), which fails if the key exists; a versioned
// object carries its generation counter in the file and is replaced under an flock(2) on a lock
// file next to it, so processes sharing the directory on one host are serialized. Temporary and
// lock files start with '.' and are never listed.
// IoError if `dir` cannot be created. With `create` false (readers: a path that does not exist
// is a typo, not an empty store): NotFound if `dir` does not exist, InvalidArgument if it is not
// a directory.
StatusOr<std::unique_ptr<VolumeStore>> MakeDirVolumeStore(const std::string& dir,
                                                          bool create = true);

// Opens the store a URL names: "dir:///abs/path", "file:///abs/path" or a plain path (a
// directory store, made with `create` as MakeDirVolumeStore).
// InvalidArgument for another scheme or an empty URL; errors of the store otherwise.
StatusOr<std::unique_ptr<VolumeStore>> OpenVolumeStore(const std::string& url,
                                                       bool create = true);

// ---------------------------------------------------------------------------------------------
// Chunking.

inline constexpr uint64_t kCdcMinChunk = 16 << 10;
inline constexpr uint64_t kCdcAvgChunk = 64 << 10;
inline constexpr uint64_t kCdcMaxChunk = 256 << 10;
inline constexpr uint64_t kDefaultPieceSize = 16ull << 20;

struct ChunkSpan {
  uint64_t offset = 0;
  uint64_t size = 0;
};

// Returns the gear table of the content-defined chunker (VOLUME.md gives the formula).
const std::array<uint64_t, 256>& CdcGearTable();

// Cuts `data` with the content-defined chunker: chunks of kCdcMinChunk..kCdcMaxChunk bytes
// (the last may be shorter), covering `data` back to back. Deterministic.
std::vector<ChunkSpan> CdcChunks(std::span<const uint8_t> data);

// Cuts a file: a valid safetensors file into its header (the length field and the JSON), then
// each tensor's bytes in pieces of at most piece_size; any other file with CdcChunks. An empty
// file has no chunks. REQUIRES: piece_size > 0.
std::vector<ChunkSpan> ChunkFile(std::span<const uint8_t> data, uint64_t piece_size);

// ---------------------------------------------------------------------------------------------
// Manifests.

// One step of a parent-XOR chain: the chunk is `base` XOR the bytes the delta object decodes to.
struct XorLink {
  std::string base;   // content digest of the chunk XORed against (64 hex)
  std::string delta;  // sha256 of the delta object's bytes (64 hex), its key in xchunks/
};

inline constexpr size_t kMaxXorChain = 16;

struct VolumeChunk {
  std::string digest;  // sha256 of the chunk's bytes, 64 lowercase hex digits
  uint64_t offset = 0;
  uint64_t size = 0;
  // Empty: the chunk is stored whole under chunks/. Otherwise (VOLUME.md, "Parent-XOR chunks")
  // xor_chain[0].base XOR delta 0 gives the chunk, xor_chain[1] gives xor_chain[0].base the same
  // way, and so on; the last base is stored whole. At most kMaxXorChain links.
  std::vector<XorLink> xor_chain;
};

struct VolumeFile {
  std::string path;  // relative, '/'-separated, see ValidateVolumePath
  uint64_t size = 0;
  uint32_t mode = 0644;  // 0644 or 0755
  std::string sha256;    // of the whole file, 64 lowercase hex digits
  std::vector<VolumeChunk> chunks;
};

inline constexpr std::string_view kVolumeFormat = "deltakv.volume.v1";

struct VolumeManifest {
  std::string ns;
  std::string name;
  std::string parent;  // digest (64 hex) of the version this one derives from, or empty
  std::vector<VolumeFile> files;  // sorted by path bytes
};

// OK if `path` is a valid file path: non-empty, at most 4096 bytes, valid UTF-8 without
// control characters, relative, '/'-separated, with no empty, "." or ".." components.
// InvalidArgument naming the path and the rule it breaks.
Status ValidateVolumePath(std::string_view path);

// Returns the canonical bytes of a manifest (VOLUME.md): keys in byte order, no whitespace,
// decimal integers. The files are written in the order given. InvalidArgument if the manifest
// would not parse back (see ParseVolumeManifest), before anything is returned.
StatusOr<std::string> SerializeVolumeManifest(const VolumeManifest& m);

// Returns the sha256 (64 hex) of canonical manifest bytes.
std::string ManifestDigest(std::string_view canonical);

// Parses canonical manifest bytes. InvalidArgument naming the field or file for: invalid
// JSON, duplicate keys, unknown or missing fields, wrong types, a wrong format string, bad
// NS/NAME/parent, bad paths, duplicate or unsorted paths, a mode other than 0644/0755, chunk
// lists that overlap, leave gaps or do not add up to the file size, bad digests, and bytes that
// differ from the canonical form of what they describe.
StatusOr<VolumeManifest> ParseVolumeManifest(std::string_view text);

// ---------------------------------------------------------------------------------------------
// Operations.

struct PushProgress {
  uint64_t chunks_done = 0;
  uint64_t chunks_total = 0;
  uint64_t bytes_uploaded = 0;
};

struct PushOptions {
  std::string tag;                          // moved to the new version when non-empty
  // A live version of the same volume (64 hex), recorded in the manifest when non-empty.
  std::string parent;
  uint64_t piece_size = kDefaultPieceSize;  // safetensors tensor pieces, 1..2^30 bytes
  // With a parent: a new chunk the store lacks, whose file has a chunk of the same size at the
  // same index in the parent, is stored as zstd(parent chunk XOR new chunk) when that delta
  // object is at most half the chunk's size and the parent chunk's own chain is shorter than
  // max_xor_chain (VOLUME.md, "Parent-XOR chunks"); otherwise whole.
  bool xor_with_parent = true;
  uint32_t max_xor_chain = 8;  // 1..kMaxXorChain
  // Optional local copy of the parent's files: a parent chunk is read from here when its
  // bytes there hash to the parent manifest's digest, else from the store.
  std::string parent_dir;
  // Threads that hash files and upload chunks; 0 = one per CPU for hashing and 8 uploads at
  // once (uploads mostly wait on the store). At most 256.
  unsigned threads = 0;
  // Called after each distinct chunk is checked or uploaded, from the worker that did it, one
  // call at a time.
  std::function<void(const PushProgress&)> progress;
};

struct PullProgress {
  uint64_t files_done = 0;
  uint64_t files_total = 0;
  uint64_t bytes_done = 0;  // file bytes written and verified
  uint64_t bytes_total = 0;
};

struct PullOptions {
  unsigned threads = 0;  // chunks fetched at once; 0 = 8
  // When set, the pull checks it before each chunk and file: once true, it stops, removes its
  // temporary directory and fails with FailedPrecondition ("interrupted"); the target is
  // untouched. (A signal handler may set it: the CLI's does on SIGINT, SIGTERM and SIGHUP.)
  const std::atomic<bool>* cancel = nullptr;
  // Called after each chunk is written and each file is verified, from the worker that did it,
  // one call at a time.
  std::function<void(const PullProgress&)> progress;
};

struct CopyOptions {
  std::string tag;  // moved to the copied version in the destination when non-empty
  unsigned threads = 0;  // chunks copied at once; 0 = 8
  // Called after each distinct chunk is checked or copied, from the worker that did it, one
  // call at a time.
  std::function<void(const PushProgress&)> progress;
};

struct PushResult {
  VolumeRef ref;  // the sealed version
  uint64_t files = 0;
  uint64_t bytes = 0;         // sum of file sizes
  uint64_t chunks_total = 0;  // distinct chunks in the version
  uint64_t chunks_uploaded = 0;
  uint64_t bytes_uploaded = 0;  // stored bytes of the uploaded chunk and delta objects
  uint64_t chunks_xor = 0;      // chunks recorded as a delta against the parent
  uint64_t bytes_xor = 0;       // stored bytes of the uploaded delta objects (in bytes_uploaded)
};

struct VolumeVersion {
  VolumeRef ref;  // digest reference
  VolumeManifest manifest;
  std::optional<int64_t> created;  // unix seconds of the first push, when recorded
  std::string tag_generation;      // for a tag reference: the generation of the tag read
};

struct TagInfo {
  std::string tag;
  std::string digest;
  std::string generation;
};

struct RemovedVersion {
  std::string digest;
  int64_t removed_at = 0;
  int64_t restorable_until = 0;
};

struct VolumeListing {
  std::string ns;
  std::string name;
  std::vector<std::string> versions;  // live digests, sorted
  std::vector<RemovedVersion> removed;
  std::vector<TagInfo> tags;  // sorted by tag
};

struct RemoveResult {
  RemovedVersion removed;
  std::vector<std::string> tags;  // tags that still point at the removed version
};

// Where a gc run is. Counts only grow; the last call has `done` set and the counts of the
// GcResult returned.
struct GcProgress {
  uint64_t objects_scanned = 0;  // chunk and delta objects listed, plus records read
  uint64_t chunks_total = 0;     // chunk and delta objects listed
  uint64_t chunks_checked = 0;   // of those, decided kept or deleted so far
  uint64_t chunks_deleted = 0;   // (for a dry run: would be deleted)
  uint64_t bytes_freed = 0;
  bool done = false;
};

struct GcOptions {
  bool dry_run = false;  // count what would be deleted; delete nothing, take no marker
  // Called after the listing, after each record read, after each chunk object is decided and,
  // with `done` set, at the end of a run that succeeds; from the calling thread.
  std::function<void(const GcProgress&)> progress;
};

struct GcResult {
  uint64_t chunks_kept = 0;
  uint64_t chunks_deleted = 0;
  uint64_t bytes_freed = 0;
  uint64_t versions_purged = 0;  // removed versions past their window
  uint64_t leases_expired = 0;
  // Temporary files of writes killed more than a lease's lifetime ago, removed (directory stores).
  uint64_t temporaries_removed = 0;
};

struct VolumesOptions {
  // Unix seconds; injectable so tests can move time.
  std::function<int64_t()> clock;  // the system clock when empty
  int64_t retention_s = 7 * 24 * 3600;
  int64_t lease_ttl_s = 24 * 3600;  // how long gc honours a push's lease
  int64_t gc_marker_ttl_s = 3600;   // how long a gc run may hold the sweep marker
  uint64_t max_manifest_bytes = 1ull << 30;
};

// Volume operations on one store. Every call that fails leaves the store as consistent as
// before: objects a failed push uploaded are unreferenced chunks that gc reclaims.
class ChunkUploader;

class Volumes {
 public:
  explicit Volumes(VolumeStore& store, VolumesOptions options = {});

  // Seals the regular files under `dir` as a version of ns/name and moves options.tag to it.
  // Uploads the chunks the store lacks, then the manifest (create-if-absent: pushing identical
  // content again yields the same digest and uploads nothing), then moves the tag. Empty
  // directories are not recorded. InvalidArgument for a bad NS/NAME/tag/parent, a symlink,
  // device, FIFO or socket under `dir`, or a file name that is not a valid path; NotFound if
  // options.parent is not a live version of ns/name;
  // FailedPrecondition while a gc sweep holds the marker (retry later), if a file changes
  // while it is pushed, or if the upload outlasts the push's lease; IoError reading `dir`.
  // A failed push leaves at most unreferenced chunks (gc reclaims them) and no version.
  StatusOr<PushResult> Push(const std::string& dir, std::string_view ns, std::string_view name,
                            const PushOptions& options = {});

  // Returns the digest a reference names: itself for a digest reference, the tag's target
  // otherwise (which may have been removed since). NotFound if the tag does not exist.
  StatusOr<std::string> Resolve(const VolumeRef& ref);

  // Returns a live version's manifest, read and verified (sha256 of the bytes, canonical
  // form), and for a tag reference the tag's generation. NotFound if the version does not exist,
  // saying so when it was removed and until when it is restorable; DataLoss if the stored manifest
  // does not match its digest.
  StatusOr<VolumeVersion> Show(const VolumeRef& ref);

  // Returns the bytes of one chunk of a version's manifest, fetched from the store and
  // verified: exactly `chunk.size` bytes whose sha256 is `chunk.digest`. NotFound if the
  // store lacks the chunk object; DataLoss naming the object if it is corrupt (bad header,
  // wrong size, undecodable payload, digest mismatch). Never returns unverified bytes.
  StatusOr<std::string> ReadChunk(const VolumeChunk& chunk);

  // Returns every volume (of `ns` when non-empty), sorted by NS then NAME; `removed` lists
  // retention records of versions that are not live again, past their window or not.
  // InvalidArgument for a bad `ns` or a malformed tag or retention record.
  StatusOr<std::vector<VolumeListing>> List(std::string_view ns = {});

  // Writes every file of a version into `dir`, verifying each chunk's sha256 and each whole
  // file's sha256, in a temporary sibling directory renamed to `dir` only when all is verified.
  // FailedPrecondition if `dir` exists and is not an empty directory; DataLoss for a corrupt
  // chunk (naming file and chunk); NotFound as for Show or for a missing chunk. On failure
  // `dir` is left as it was and the temporary directory is removed.
  Status Pull(const VolumeRef& ref, const std::string& dir, const PullOptions& options = {});

  // Copies the version `ref` names in `source` into this store as a version of ns/name,
  // chunk by chunk through memory (nothing is staged on local disk): the source manifest is
  // read and verified, each chunk this store lacks is read from `source`, verified against
  // its digest and stored, then the manifest is sealed (under the same lease and gc rules as
  // a push) and options.tag is moved. Copied under its own ns/name the version keeps its
  // digest; under another name its manifest names the new volume, and so has a new digest,
  // and keeps no parent (the parent digest names a version of the source volume).
  // Errors: as for Show on the source, DataLoss for a corrupt source chunk (naming it),
  // NotFound for a missing one, and as for Push in this store.
  StatusOr<PushResult> CopyFrom(VolumeStore& source, const VolumeRef& ref, std::string_view ns,
                                std::string_view name, const CopyOptions& options = {});

  // Seals the files of a plain source (deltasync/volume_source.h) as a version of ns/name, as
  // Push seals a directory: the same chunks, manifest and digest for the same files. Each file
  // is read in ranged reads and chunked as it arrives; nothing is staged on local disk. The
  // chunks the store lacks are uploaded in batches, each leased before it is checked, then the
  // manifest is sealed and options.push.tag moved. Errors: as for Push (InvalidArgument for an
  // option out of range or a listed path that is not a valid volume path, or a path that is a
  // directory of another); NotFound if the source lists no files; the source's errors
  // (FailedPrecondition for a file that changed while it was read), each naming the source. A
  // failed call leaves at most unreferenced chunks and no version; calling it again uploads
  // only the chunks still missing.
  StatusOr<PushResult> PushFrom(FileSource& source, std::string_view ns, std::string_view name,
                                const PushFromOptions& options);

  // Returns a tag's target and generation. NotFound if it does not exist.
  StatusOr<TagInfo> GetTag(std::string_view ns, std::string_view name, std::string_view tag);

  // Points `tag` of ref's volume at the version `ref` names (which must be live). With
  // `expected_generation` the move happens only if the tag's generation is that value ("" =
  // the tag must not exist), else FailedPrecondition; without it the tag is moved whatever it
  // pointed at (read, then compare-and-swap, retried on a lost race). Returns the new state.
  StatusOr<TagInfo> Tag(const VolumeRef& ref, std::string_view tag,
                        std::optional<std::string> expected_generation = std::nullopt);

  // Removes a live version: its manifest moves into a retention record stamped with the
  // current time. Tags are left in place and reported. NotFound if the version is not live;
  // DataLoss if its stored manifest does not match its digest.
  StatusOr<RemoveResult> Remove(const VolumeRef& ref);

  // Brings a removed version back while its retention window lasts. NotFound if there is no
  // record of it; FailedPrecondition if the window has ended or a gc sweep is running.
  Status Restore(const VolumeRef& ref);

  // Deletes chunks no live version, no version within its retention window and no unexpired
  // push lease refers to, retention records past their window and expired leases. Takes the
  // gc sweep marker first (FailedPrecondition if another gc holds it) and releases it at the
  // end. On any read or parse error, and if marking outlasts the marker (FailedPrecondition),
  // nothing more is deleted and the error is returned. Protocol: VOLUME.md, section 7.
  StatusOr<GcResult> Gc(const GcOptions& options = {});

 private:
  int64_t Now() const;
  // Writes a manifest create-if-absent (an identical one already there is success) and the
  // version's info record.
  Status SealManifest(const std::string& ns, const std::string& name, const std::string& digest,
                      const std::string& text);
  // The end of every push: its counts from `upload`; FailedPrecondition if the upload outlasted
  // its lease (`lease_expiry`, unix seconds: gc may have removed chunks it relied on); else the
  // XOR chains applied to `manifest`, the manifest sealed as a version (result->ref) and tagged
  // `tag` when not empty.
  Status FinishPush(const ChunkUploader& upload, int64_t lease_expiry, VolumeManifest& manifest,
                    const std::string& tag, PushResult* result);

  VolumeStore& store_;
  VolumesOptions options_;
};

}  // namespace deltakv::deltasync
