// Sets an environment variable for the life of the object, then puts back what was there.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace tpar_test {

struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(const char* n, const char* value) : name(n) {
    if (const char* v = std::getenv(n)) old = v;
    ::setenv(n, value, 1);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

}  // namespace tpar_test
