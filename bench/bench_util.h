// Shared helpers of the deltakv benchmarks: environment line, build-type warning, timing.
#pragma once

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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

// "a,b,c" as a list of T (numbers); items that do not parse read as T{}.
template <typename T>
std::vector<T> ParseList(const char* s) {
  std::vector<T> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::stringstream is(item);
    T v{};
    is >> v;
    out.push_back(v);
  }
  return out;
}

// The value after flag argv[*i] (advancing *i), or exits 2 naming the flag.
inline const char* FlagValue(int argc, char** argv, int* i) {
  if (*i + 1 >= argc) {
    std::fprintf(stderr, "missing value for %s\n", argv[*i]);
    std::exit(2);
  }
  return argv[++*i];
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
