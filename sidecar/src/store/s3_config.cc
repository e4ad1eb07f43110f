// Resolution of S3Config from the environment and the AWS shared files (an INI dialect:
// "[section]", "key = value", "#" or ";" comments, and indented "k = v" lines under a
// "key =" line with no value, which form the nested section "key.k").
#include "store/s3_config.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace deltakv::sidecar {
namespace {

using Ini = std::map<std::string, std::map<std::string, std::string>>;

std::string Strip(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// Parses the file; false if it cannot be opened.
bool ReadIni(const std::string& path, Ini& out) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line, section, nested;
  while (std::getline(in, line)) {
    const bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    std::string t = Strip(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      section = Strip(t.substr(1, t.size() - 2));
      nested.clear();
      continue;
    }
    const size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    std::string key = Strip(t.substr(0, eq));
    std::string value = Strip(t.substr(eq + 1));
    if (indented && !nested.empty()) {
      out[section][nested + "." + key] = value;
      continue;
    }
    nested = value.empty() ? key : "";
    if (!value.empty()) out[section][key] = value;
  }
  return true;
}

const std::string* Find(const Ini& ini, const std::string& section, const std::string& key) {
  auto s = ini.find(section);
  if (s == ini.end()) return nullptr;
  auto k = s->second.find(key);
  return k == s->second.end() ? nullptr : &k->second;
}

std::string Get(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  return v == nullptr ? "" : v;
}

}  // namespace

std::string S3Config::Describe() const {
  std::string key = access_key_id.size() > 8 ? access_key_id.substr(0, 8) + "..." : access_key_id;
  return "endpoint " + endpoint + ", region " + region + ", " +
         (path_style ? "path-style" : "virtual-hosted") + ", key " + key + " from " +
         credential_source;
}

StatusOr<S3Config> ResolveS3Config(const EnvLookup& env_in) {
  const EnvLookup env = env_in ? env_in : EnvLookup([](const char* n) { return std::getenv(n); });
  const std::string home = Get(env, "HOME");
  const std::string profile = Get(env, "AWS_PROFILE").empty() ? "default" : Get(env, "AWS_PROFILE");

  Ini creds, config;
  std::string creds_path = Get(env, "AWS_SHARED_CREDENTIALS_FILE");
  std::string config_path = Get(env, "AWS_CONFIG_FILE");
  if (!creds_path.empty() && !ReadIni(creds_path, creds)) {
    return InvalidArgument("AWS_SHARED_CREDENTIALS_FILE '" + creds_path + "' cannot be read");
  }
  if (!config_path.empty() && !ReadIni(config_path, config)) {
    return InvalidArgument("AWS_CONFIG_FILE '" + config_path + "' cannot be read");
  }
  if (creds_path.empty() && !home.empty()) {
    creds_path = home + "/.aws/credentials";
    ReadIni(creds_path, creds);  // optional
  }
  if (config_path.empty() && !home.empty()) {
    config_path = home + "/.aws/config";
    ReadIni(config_path, config);  // optional
  }
  const std::string config_section = profile == "default" ? "default" : "profile " + profile;
  auto from_config = [&](const std::string& key) -> std::string {
    const std::string* v = Find(config, config_section, key);
    return v == nullptr ? "" : *v;
  };

  S3Config c;
  // Credentials.
  const std::string env_key = Get(env, "AWS_ACCESS_KEY_ID");
  const std::string env_secret = Get(env, "AWS_SECRET_ACCESS_KEY");
  if (!env_key.empty() || !env_secret.empty()) {
    if (env_key.empty() || env_secret.empty()) {
      return InvalidArgument(
          "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together (one is empty)");
    }
    c.access_key_id = env_key;
    c.secret_access_key = env_secret;
    c.session_token = Get(env, "AWS_SESSION_TOKEN");
    c.credential_source = "the environment";
  } else {
    struct Source {
      const Ini* ini;
      std::string section;
      std::string name;
    };
    for (const Source& s : {Source{&creds, profile, "credentials file " + creds_path},
                            Source{&config, config_section, "config file " + config_path}}) {
      const std::string* key = Find(*s.ini, s.section, "aws_access_key_id");
      const std::string* secret = Find(*s.ini, s.section, "aws_secret_access_key");
      if (key == nullptr && secret == nullptr) continue;
      if (key == nullptr || secret == nullptr) {
        return InvalidArgument(s.name + ", profile '" + profile + "': " +
                               (key == nullptr ? "aws_access_key_id" : "aws_secret_access_key") +
                               " is missing");
      }
      c.access_key_id = *key;
      c.secret_access_key = *secret;
      const std::string* token = Find(*s.ini, s.section, "aws_session_token");
      if (token != nullptr) c.session_token = *token;
      c.credential_source = s.name + " (profile " + profile + ")";
      break;
    }
    if (c.access_key_id.empty()) {
      return InvalidArgument(
          "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give profile '" +
          profile + "' aws_access_key_id and aws_secret_access_key in " + creds_path);
    }
  }

  // Region.
  for (const std::string& v :
       {Get(env, "AWS_REGION"), Get(env, "AWS_DEFAULT_REGION"), from_config("region")}) {
    if (!v.empty()) {
      c.region = v;
      break;
    }
  }
  if (c.region.empty()) c.region = "us-east-1";
  for (char ch : c.region) {
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-')) {
      return InvalidArgument("region '" + c.region + "' is not of the form us-east-1");
    }
  }

  // Endpoint.
  std::string endpoint;
  for (const std::string& v : {Get(env, "AWS_ENDPOINT_URL_S3"), Get(env, "AWS_ENDPOINT_URL"),
                               from_config("s3.endpoint_url"), from_config("endpoint_url")}) {
    if (!v.empty()) {
      endpoint = v;
      break;
    }
  }
  const bool custom = !endpoint.empty();
  if (!custom) endpoint = "https://s3." + c.region + ".amazonaws.com";
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  const bool scheme_ok = endpoint.rfind("http://", 0) == 0 || endpoint.rfind("https://", 0) == 0;
  const size_t host_at = endpoint.find("://") + 3;
  if (!scheme_ok || host_at >= endpoint.size() ||
      endpoint.find_first_of("/?#@ ", host_at) != std::string::npos) {
    return InvalidArgument("S3 endpoint '" + endpoint +
                           "' must be http://host[:port] or https://host[:port], with no path");
  }
  c.endpoint = endpoint;

  // Addressing.
  std::string style = Get(env, "AWS_S3_ADDRESSING_STYLE");
  if (style.empty()) style = from_config("s3.addressing_style");
  if (style.empty() || style == "auto") {
    c.path_style = custom;
  } else if (style == "path" || style == "virtual") {
    c.path_style = style == "path";
  } else {
    return InvalidArgument("S3 addressing style '" + style + "' is not path, virtual or auto");
  }
  c.ca_file = Get(env, "AWS_CA_BUNDLE");
  return c;
}

}  // namespace deltakv::sidecar
