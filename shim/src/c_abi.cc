// The ABI-wide functions of deltakv_base.h and the thread-local message behind them.
#include "c_abi.h"

#include "deltakv/deltakv_base.h"

namespace deltakv::shim {
namespace {

thread_local std::string t_last_error;

static_assert(static_cast<int>(DELTAKV_ERR_INVALID_ARGUMENT) ==
              static_cast<int>(StatusCode::kInvalidArgument));
static_assert(static_cast<int>(DELTAKV_ERR_NOT_FOUND) == static_cast<int>(StatusCode::kNotFound));
static_assert(static_cast<int>(DELTAKV_ERR_DATA_LOSS) == static_cast<int>(StatusCode::kDataLoss));
static_assert(static_cast<int>(DELTAKV_ERR_FAILED_PRECONDITION) ==
              static_cast<int>(StatusCode::kFailedPrecondition));
static_assert(static_cast<int>(DELTAKV_ERR_RESOURCE_EXHAUSTED) ==
              static_cast<int>(StatusCode::kResourceExhausted));
static_assert(static_cast<int>(DELTAKV_ERR_IO) == static_cast<int>(StatusCode::kIoError));
static_assert(static_cast<int>(DELTAKV_ERR_UNIMPLEMENTED) ==
              static_cast<int>(StatusCode::kUnimplemented));
static_assert(static_cast<int>(DELTAKV_ERR_INTERNAL) == static_cast<int>(StatusCode::kInternal));

}  // namespace

deltakv_status ReportStatus(const char* fn, const Status& s) {
  try {
    if (s.ok()) {
      t_last_error.clear();
    } else {
      t_last_error = std::string(fn) + ": " + s.message();
    }
  } catch (...) {
    // Out of memory for the message: the code still says what happened.
  }
  return static_cast<deltakv_status>(static_cast<int>(s.code()));
}

const char* LastErrorCStr() { return t_last_error.c_str(); }

}  // namespace deltakv::shim

extern "C" {

const char* deltakv_version(void) { return DELTAKV_VERSION_STRING; }

uint32_t deltakv_abi_version(void) { return DELTAKV_ABI_VERSION; }

const char* deltakv_last_error(void) { return deltakv::shim::LastErrorCStr(); }

const char* deltakv_status_name(int status) {
  if (status < DELTAKV_OK || status > DELTAKV_ERR_INTERNAL) return "UNKNOWN";
  // StatusCodeName returns NUL-terminated literals.
  return deltakv::StatusCodeName(static_cast<deltakv::StatusCode>(status)).data();
}

}  // extern "C"
