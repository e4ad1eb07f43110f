/* deltakv_base.h: the conventions every part of the libdeltakv C ABI follows (deltakv.h for the
 * engine handle, deltakv_kv.h for the host KV tier). Included by both.
 *
 * Status codes. Every function that can fail returns a deltakv_status: DELTAKV_OK (0) or a
 * positive error code naming the class of the failure. Out-parameters are written only on
 * success unless the function says otherwise. Functions that cannot fail (getters) return their
 * value directly and say what they return for a NULL handle.
 *
 * Messages. Every function that returns a deltakv_status also records a message for the calling
 * thread: deltakv_last_error() gives it ("<function>: <what went wrong>" after a failure, ""
 * after a success). The message is thread-local: a call on another thread never changes it,
 * and it stays valid until the calling thread's next call to a function that returns a
 * deltakv_status. Failures that happen on the library's own threads, outside any call (a sync
 * that failed on this rank, a copy that failed in the background), are kept where they belong:
 * deltakv_engine_sync_error() for the engine handle, and the status of
 * deltakv_kv_complete_load / deltakv_kv_complete_store for a copy.
 *
 * Versioned structs. Every parameter struct passed by pointer starts with
 * `uint32_t struct_size`, which the caller sets to sizeof(the struct) as it compiled it (the
 * inline *_default_* functions of the headers do). Later versions of the library only append
 * fields; the library reads the first struct_size bytes, uses its own defaults for fields past
 * them, and rejects with DELTAKV_ERR_INVALID_ARGUMENT a struct_size below the struct's first
 * version, or a larger struct (from a newer header) whose bytes past the fields this library
 * knows are not all zero. No struct ends in padding: what would be padding is a field named
 * reserved*, which the library ignores, so a later field is always appended past sizeof. Elements
 * of arrays (keys, regions, layers, pieces, events) have a fixed size forever; a change to one
 * gives a new function. Output structs that the library fills (deltakv_kv_stats,
 * deltakv_sync_stats) carry struct_size the same way: the library fills at most that many bytes.
 *
 * Versions. DELTAKV_VERSION_* is the release the header belongs to; deltakv_version() is the
 * release of the library loaded at run time. DELTAKV_ABI_VERSION is the number of the binary
 * interface: it is the SONAME's number (libdeltakv.so.<ABI>), it changes when a change breaks
 * callers built against an older header, and deltakv_abi_version() returns the library's.
 * An engine can check at start that deltakv_abi_version() == DELTAKV_ABI_VERSION.
 *
 * Exceptions never cross the ABI; an unexpected one is reported as DELTAKV_ERR_INTERNAL.
 */
#ifndef DELTAKV_DELTAKV_BASE_H_
#define DELTAKV_DELTAKV_BASE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DELTAKV_VERSION_MAJOR 0
#define DELTAKV_VERSION_MINOR 2
#define DELTAKV_VERSION_PATCH 0
#define DELTAKV_VERSION_STRING "0.2.0"

/* The binary interface number (libdeltakv.so.1). */
#define DELTAKV_ABI_VERSION 1

typedef enum deltakv_status {
  DELTAKV_OK = 0,
  DELTAKV_ERR_INVALID_ARGUMENT = 1,    /* bad argument, handle, layout or struct; nothing changed */
  DELTAKV_ERR_NOT_FOUND = 2,           /* no such segment, pool, tensor or block */
  DELTAKV_ERR_DATA_LOSS = 3,           /* a checksum or a copy failed, or shared state is corrupt */
  DELTAKV_ERR_FAILED_PRECONDITION = 4, /* wrong state: issued twice, completed, pinned, started */
  DELTAKV_ERR_RESOURCE_EXHAUSTED = 5,  /* out of memory, or a cap was hit */
  DELTAKV_ERR_IO = 6,                  /* the operating system refused */
  DELTAKV_ERR_UNIMPLEMENTED = 7,       /* not in this build (e.g. the cuda backend) */
  DELTAKV_ERR_INTERNAL = 8             /* a bug */
} deltakv_status;

/* The library's release, e.g. "0.2.0". A static string. */
const char* deltakv_version(void);

/* The library's DELTAKV_ABI_VERSION. */
uint32_t deltakv_abi_version(void);

/* The calling thread's message of its last call that returned a deltakv_status ("" if that call
 * succeeded or there was none). Valid until the thread's next such call. */
const char* deltakv_last_error(void);

/* The name of a status code: "OK", "INVALID_ARGUMENT", "NOT_FOUND", "DATA_LOSS",
 * "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED", "IO_ERROR", "UNIMPLEMENTED", "INTERNAL" for 0 to 8;
 * "UNKNOWN" for any other value. A static string. */
const char* deltakv_status_name(int status);

#ifdef __cplusplus
}
#endif

#endif /* DELTAKV_DELTAKV_BASE_H_ */
