// The S3 file source's key handling: keys as ListObjectsV2 lists them with encoding-type=url
// (AWS writes '+' for a space, moto %20), and keys encoded for a request path. The source
// against S3 itself is tested end to end by tests/cli/volume_sync_plain_test.py.
#include "store/s3_file_source.h"

#include <gtest/gtest.h>

#include "store/s3_client.h"

namespace deltakv::sidecar {
namespace {

TEST(S3FileSourceKeys, DecodesListedKeys) {
  EXPECT_EQ(DecodeListedKey("plain/a.bin").value(), "plain/a.bin");
  EXPECT_EQ(DecodeListedKey("a+b%2Bc").value(), "a b+c");
  EXPECT_EQ(DecodeListedKey("a%20b").value(), "a b");
  EXPECT_EQ(DecodeListedKey("caf%C3%A9%7e").value(), "caf\xc3\xa9~");
  EXPECT_EQ(DecodeListedKey("").value(), "");
  for (const char* bad : {"%", "%2", "a%zz", "%g0", "x%2"}) {
    EXPECT_EQ(DecodeListedKey(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(S3FileSourceKeys, EncodesRequestPathsOnce) {
  EXPECT_EQ(S3EncodeKey("a/b.c-d_e~f"), "a/b.c-d_e~f");
  EXPECT_EQ(S3EncodeKey("dir with space/a+b=c&d"), "dir%20with%20space/a%2Bb%3Dc%26d");
  EXPECT_EQ(S3EncodeKey("caf\xc3\xa9/100%"), "caf%C3%A9/100%25");
  EXPECT_EQ(S3EncodeKey("/lead//double/"), "/lead//double/");
}

TEST(S3FileSourceKeys, SourceNeedsCredentials) {
  S3Config config;
  config.endpoint = "http://127.0.0.1:1";
  config.region = "us-east-1";
  EXPECT_EQ(MakeS3FileSource({"bucket", "p"}, config).status().code(),
            StatusCode::kInvalidArgument);
  config.access_key_id = "k";
  config.secret_access_key = "s";
  auto source = MakeS3FileSource({"bucket", "p"}, config);
  ASSERT_TRUE(source.ok());
  EXPECT_EQ((*source)->Describe(), "s3://bucket/p");
}

}  // namespace
}  // namespace deltakv::sidecar
