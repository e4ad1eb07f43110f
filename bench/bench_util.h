// Shared helpers of the deltakv benchmarks: environment line, build-type warning, timing.
#pragma once

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace deltakv::bench {

inline const char* BuildType() {
#ifdef NDEBUG
  return "optimized";
#else
  return "debug";
#endif
}

// Prints one JSON line describing the machine and build; warns on stderr about debug builds.
inline void PrintEnvironment(const std::string& bench) {
  utsname u{};
  uname(&u);
  nlohmann::json j = {{"bench", bench},       {"kind", "environment"},
                      {"build", BuildType()}, {"cpus", std::thread::hardware_concurrency()},
                      {"kernel", u.release},  {"machine", u.machine}};
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
#ifndef NDEBUG
  std::fprintf(stderr, "WARNING: %s built without NDEBUG; numbers are not meaningful\n",
               bench.c_str());
#endif
}

inline void PrintResult(const nlohmann::json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace deltakv::bench
