// Where an S3 volume store lives and how it signs in, resolved the way the AWS tools do.
//
//   endpoint    AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's endpoint_url, else
//               https://s3.<region>.amazonaws.com
//   region      AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else us-east-1
//   credentials AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN), else the
//               profile's aws_access_key_id / aws_secret_access_key / aws_session_token in the
//               shared credentials file, then in the config file
//   profile     AWS_PROFILE, else "default"; files AWS_SHARED_CREDENTIALS_FILE (default
//               ~/.aws/credentials) and AWS_CONFIG_FILE (default ~/.aws/config), where a
//               profile other than default is the section "[profile NAME]"
//   addressing  AWS_S3_ADDRESSING_STYLE=path|virtual, else the profile's nested
//               "s3 =\n  addressing_style = path|virtual", else virtual-hosted on AWS's own
//               endpoint and path-style on a custom endpoint ("auto" means this default)
//   CA file     AWS_CA_BUNDLE, else the system CA store
//
// The resolved config holds the secret; S3Config::Describe() never shows it.
#pragma once

#include <functional>
#include <string>

#include "base/status.h"

namespace deltakv::sidecar {

struct S3Config {
  std::string endpoint;  // "scheme://host[:port]", no trailing '/'
  std::string region;
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" when none
  bool path_style = false;
  std::string ca_file;            // "" = the system CA store
  std::string credential_source;  // "environment", "credentials file ~/.aws/credentials", ...

  // "endpoint http://127.0.0.1:9000, region us-east-1, path-style, key AKIA... from the
  // environment" (the key id is shortened; no secret).
  std::string Describe() const;
};

// Looks up an environment variable; nullptr when unset. Injectable for tests.
using EnvLookup = std::function<const char*(const char*)>;

// Resolves the config as the header describes. InvalidArgument naming the variable or file
// entry for: no credentials anywhere, an access key without its secret, an endpoint that is
// not http:// or https:// host[:port] (a path is refused), an unknown addressing style, or a
// shared file that cannot be read although it was named explicitly.
StatusOr<S3Config> ResolveS3Config(const EnvLookup& env = {});

}  // namespace deltakv::sidecar
