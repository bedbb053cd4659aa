#include "harness/system/memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace qattn {

namespace {

constexpr std::uint64_t kUnlimited = std::numeric_limits<std::uint64_t>::max();

// The first number in a file ("max" and unreadable files are no limit).
std::uint64_t read_number(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return kUnlimited;
  try {
    return std::stoull(word);
  } catch (const std::exception&) {
    return kUnlimited;
  }
}

std::uint64_t meminfo_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return kUnlimited;
}

// Room under memory.max - memory.current of the process's cgroup and each cgroup above it.
std::uint64_t cgroup_room() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  if (path.empty()) return kUnlimited;
  std::uint64_t room = kUnlimited;
  for (;;) {
    const std::string dir = "/sys/fs/cgroup" + (path == "/" ? std::string() : path);
    const std::uint64_t max = read_number(dir + "/memory.max");
    if (max != kUnlimited) {
      const std::uint64_t used = read_number(dir + "/memory.current");
      room = std::min(room, used == kUnlimited || used >= max ? 0 : max - used);
    }
    if (path == "/" || path.empty()) break;
    const auto slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
  return room;
}

// Room under the address-space limit (ulimit -v) beyond what the process maps already.
std::uint64_t address_space_room() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_AS, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return kUnlimited;
  std::ifstream in("/proc/self/statm");
  std::uint64_t pages = 0;
  if (!(in >> pages)) return kUnlimited;
  const std::uint64_t mapped = pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  return mapped >= lim.rlim_cur ? 0 : lim.rlim_cur - mapped;
}

}  // namespace

std::uint64_t checked_product(const std::string& what, std::initializer_list<std::uint64_t> factors) {
  constexpr std::uint64_t kMax = std::uint64_t{1} << 63;
  std::uint64_t p = 1;
  for (std::uint64_t f : factors) {
    if (f != 0 && p > kMax / f) {
      std::string list;
      for (std::uint64_t g : factors) list += (list.empty() ? "" : " x ") + std::to_string(g);
      throw std::invalid_argument(what + ": " + list + " elements is more than any machine can hold; expected a size below 2^63");
    }
    p *= f;
  }
  return p;
}

std::uint64_t checked_sum(const std::string& what, std::initializer_list<std::uint64_t> terms) {
  constexpr std::uint64_t kMax = std::uint64_t{1} << 63;
  std::uint64_t s = 0;
  for (std::uint64_t t : terms) {
    if (t > kMax - s) throw std::invalid_argument(what + ": more memory than any machine holds (over 2^63 bytes); expected a smaller input");
    s += t;
  }
  return s;
}

std::uint64_t available_memory() { return std::min({meminfo_available(), cgroup_room(), address_space_room()}); }

std::string bytes_text(std::uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double x = static_cast<double>(bytes);
  int u = 0;
  while (x >= 1024 && u < 6) x /= 1024, ++u;
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(u == 0 ? 0 : 1);
  s << x << ' ' << units[u];
  return s.str();
}

void require_memory(const std::string& what, std::uint64_t bytes) {
  const std::uint64_t room = available_memory();
  if (bytes <= room) return;
  throw std::invalid_argument(what + ": needs " + bytes_text(bytes) + " of memory; " + bytes_text(room) +
                              " is available on this machine; expected a smaller input (fewer heads, tokens or rows)");
}

}  // namespace qattn
