// The conventions of the whole C ABI (deltakv_base.h), checked on both halves: one status
// convention, one thread-local message, versions, and struct_size on every parameter struct.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <thread>

#include "deltakv/deltakv.h"

namespace deltakv {
namespace {

std::string LastError() { return deltakv_last_error(); }

TEST(CAbiTest, VersionsMatchTheHeader) {
  EXPECT_STREQ(deltakv_version(), DELTAKV_VERSION_STRING);
  const std::string want = std::to_string(DELTAKV_VERSION_MAJOR) + "." +
                           std::to_string(DELTAKV_VERSION_MINOR) + "." +
                           std::to_string(DELTAKV_VERSION_PATCH);
  EXPECT_EQ(std::string(deltakv_version()), want);
  EXPECT_EQ(deltakv_abi_version(), static_cast<uint32_t>(DELTAKV_ABI_VERSION));
}

TEST(CAbiTest, StatusNamesCoverEveryCode) {
  const char* names[] = {"OK",        "INVALID_ARGUMENT",    "NOT_FOUND",
                         "DATA_LOSS", "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED",
                         "IO_ERROR",  "UNIMPLEMENTED",       "INTERNAL"};
  for (int code = DELTAKV_OK; code <= DELTAKV_ERR_INTERNAL; ++code) {
    EXPECT_STREQ(deltakv_status_name(code), names[code]) << code;
  }
  EXPECT_STREQ(deltakv_status_name(-4), "UNKNOWN");
  EXPECT_STREQ(deltakv_status_name(DELTAKV_ERR_INTERNAL + 1), "UNKNOWN");
}

TEST(CAbiTest, OneMessagePerThreadAcrossBothHalves) {
  EXPECT_EQ(deltakv_engine_start(nullptr), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "deltakv_engine_start: engine is NULL");
  // A KV call that succeeds clears it: the message is the thread's last call's, whichever half.
  uint64_t fp = 0;
  const uint32_t token = 7;
  EXPECT_EQ(deltakv_kv_token_fingerprint(&token, 1, &fp), DELTAKV_OK);
  EXPECT_EQ(LastError(), "");
  size_t n = 0;
  EXPECT_EQ(deltakv_kv_lookup(nullptr, nullptr, 0, &n), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "deltakv_kv_lookup: client is NULL");
  std::string seen = "unset";
  std::thread other([&] {
    seen = LastError();
    (void)deltakv_engine_poll(nullptr, nullptr);
  });
  other.join();
  EXPECT_EQ(seen, "");
  EXPECT_EQ(LastError(), "deltakv_kv_lookup: client is NULL");
  // Getters neither fail nor touch the message.
  EXPECT_EQ(deltakv_engine_get_state(nullptr), DELTAKV_ENGINE_STOPPED);
  EXPECT_EQ(deltakv_engine_policy_version(nullptr), 0u);
  EXPECT_STREQ(deltakv_engine_sync_error(nullptr), "");
  EXPECT_EQ(LastError(), "deltakv_kv_lookup: client is NULL");
}

TEST(CAbiTest, SyncStatsAreVersionedAndZeroBeforeASync) {
  deltakv_engine* e = nullptr;
  ASSERT_EQ(deltakv_engine_create(nullptr, &e), DELTAKV_OK) << LastError();
  deltakv_sync_stats st;
  std::memset(&st, 0xff, sizeof(st));
  st.struct_size = sizeof(st);
  ASSERT_EQ(deltakv_engine_get_sync_stats(e, &st), DELTAKV_OK) << LastError();
  EXPECT_EQ(st.struct_size, sizeof(st));
  EXPECT_EQ(st.outcome, 0);
  EXPECT_EQ(st.sync_id, 0u);
  EXPECT_EQ(st.parts, 0u);
  EXPECT_EQ(st.bytes, 0u);
  EXPECT_EQ(st.stage_us, 0u);
  EXPECT_EQ(st.pause_us, 0u);
  // A newer caller's larger struct: the fields this library does not know read zero.
  struct Newer {
    deltakv_sync_stats base;
    uint64_t later_field;
  } newer;
  newer.base.struct_size = sizeof(newer);
  newer.later_field = 42;
  ASSERT_EQ(deltakv_engine_get_sync_stats(e, &newer.base), DELTAKV_OK) << LastError();
  EXPECT_EQ(newer.later_field, 0u);
  EXPECT_EQ(newer.base.struct_size, sizeof(deltakv_sync_stats));
  st.struct_size = 4;
  EXPECT_EQ(deltakv_engine_get_sync_stats(e, &st), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("sizeof(deltakv_sync_stats)"), std::string::npos) << LastError();
  EXPECT_EQ(deltakv_engine_get_sync_stats(e, nullptr), DELTAKV_ERR_INVALID_ARGUMENT);
  st.struct_size = sizeof(st);
  EXPECT_EQ(deltakv_engine_get_sync_stats(nullptr, &st), DELTAKV_ERR_INVALID_ARGUMENT);
  deltakv_engine_free(e);
}

TEST(CAbiTest, EngineParamsAreVersioned) {
  deltakv_engine* e = nullptr;
  // NULL = the defaults.
  ASSERT_EQ(deltakv_engine_create(nullptr, &e), DELTAKV_OK) << LastError();
  EXPECT_EQ(deltakv_engine_get_state(e), DELTAKV_ENGINE_CREATED);
  EXPECT_STREQ(deltakv_engine_sync_error(e), "");
  deltakv_engine_free(e);

  deltakv_engine_params p = deltakv_engine_default_params();
  EXPECT_EQ(p.struct_size, sizeof(deltakv_engine_params));
  p.struct_size = 0;
  e = reinterpret_cast<deltakv_engine*>(&p);  // must be reset on failure
  EXPECT_EQ(deltakv_engine_create(&p, &e), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(e, nullptr);
  EXPECT_NE(LastError().find("deltakv_engine_default_params"), std::string::npos) << LastError();

  // A struct from a newer header: fine while the fields this library does not know are zero.
  struct Newer {
    deltakv_engine_params base;
    uint64_t future_field;
  } newer{deltakv_engine_default_params(), 0};
  newer.base.struct_size = sizeof(Newer);
  newer.base.rank = 1;
  newer.base.world_size = 2;
  ASSERT_EQ(deltakv_engine_create(&newer.base, &e), DELTAKV_OK) << LastError();
  deltakv_engine_free(e);
  newer.future_field = 5;
  EXPECT_EQ(deltakv_engine_create(&newer.base, &e), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("newer header"), std::string::npos) << LastError();

  // A struct from the header before staging_reserve_bytes: the library's default (0) applies.
  p = deltakv_engine_default_params();
  EXPECT_EQ(p.staging_reserve_bytes, 0u);
  p.struct_size = offsetof(deltakv_engine_params, staging_reserve_bytes);
  p.staging_reserve_bytes = 12345;  // past struct_size: never read
  ASSERT_EQ(deltakv_engine_create(&p, &e), DELTAKV_OK) << LastError();
  deltakv_engine_free(e);

  p = deltakv_engine_default_params();
  p.rank = 2;
  p.world_size = 2;
  EXPECT_EQ(deltakv_engine_create(&p, &e), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("rank 2 of world_size 2"), std::string::npos) << LastError();
  EXPECT_EQ(deltakv_engine_create(&p, nullptr), DELTAKV_ERR_INVALID_ARGUMENT);

  // A shm_name no segment can have is refused at create, not after start's attach timeout.
  const std::string too_long(195, 'a');  // fits, but "<name>.tensors.0" does not
  for (const char* bad : {"bad/name", "", ".hidden", "sp ace", too_long.c_str()}) {
    p = deltakv_engine_default_params();
    p.shm_name = bad;
    e = reinterpret_cast<deltakv_engine*>(&p);
    EXPECT_EQ(deltakv_engine_create(&p, &e), DELTAKV_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_EQ(e, nullptr);
    EXPECT_NE(LastError().find("shm_name"), std::string::npos) << LastError();
  }
  p = deltakv_engine_default_params();
  p.shm_name = "my-sidecar.1";
  ASSERT_EQ(deltakv_engine_create(&p, &e), DELTAKV_OK) << LastError();
  deltakv_engine_free(e);
}

TEST(CAbiTest, CallbacksAreVersioned) {
  deltakv_engine* e = nullptr;
  ASSERT_EQ(deltakv_engine_create(nullptr, &e), DELTAKV_OK);
  deltakv_callbacks cb = deltakv_default_callbacks();
  EXPECT_EQ(cb.struct_size, sizeof(deltakv_callbacks));
  EXPECT_EQ(cb.pause, nullptr);
  EXPECT_EQ(deltakv_engine_set_callbacks(e, &cb), DELTAKV_OK) << LastError();
  EXPECT_EQ(LastError(), "");
  deltakv_callbacks zero;
  std::memset(&zero, 0, sizeof(zero));
  EXPECT_EQ(deltakv_engine_set_callbacks(e, &zero), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("deltakv_default_callbacks"), std::string::npos) << LastError();
  EXPECT_EQ(deltakv_engine_set_callbacks(e, nullptr), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(deltakv_engine_set_callbacks(nullptr, &cb), DELTAKV_ERR_INVALID_ARGUMENT);
  deltakv_engine_free(e);
}

TEST(CAbiTest, KvClientParamsAreVersioned) {
  deltakv_kv_client_params p = deltakv_kv_client_default_params();
  p.pool_name = "deltakv-c-abi-test-no-such-pool.kv";
  static char kv[4096];
  p.layout.kind = DELTAKV_KV_LAYOUT_CROSS_LAYER;
  p.layout.num_blocks = 1;
  p.layout.base = kv;
  p.layout.block_bytes = sizeof(kv);
  struct Newer {
    deltakv_kv_client_params base;
    uint64_t future_field;
  } newer{p, 9};
  newer.base.struct_size = sizeof(Newer);
  deltakv_kv_client* c = nullptr;
  EXPECT_EQ(deltakv_kv_client_open(&newer.base, &c), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("newer header"), std::string::npos) << LastError();
  newer.future_field = 0;
  // Past the struct check, the (absent) pool is what fails.
  EXPECT_EQ(deltakv_kv_client_open(&newer.base, &c), DELTAKV_ERR_NOT_FOUND) << LastError();
  EXPECT_EQ(c, nullptr);
}

}  // namespace
}  // namespace deltakv
