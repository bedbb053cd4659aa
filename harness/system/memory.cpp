#include "harness/system/memory.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>

namespace qattn {

namespace {

constexpr std::uint64_t kUnlimited = std::numeric_limits<std::uint64_t>::max();

// A small file of the kernel's (/proc, /sys) read with POSIX calls, "" if it cannot be read. No
// iostreams: this runs inside the Python module, beside torch, which on the H200 machine's Python
// makes the module's first iostream use crash (the same conflict that dictates their import order).
std::string read_small_file(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      text.append(buf, static_cast<std::size_t>(n));
      if (text.size() > (1u << 20)) break;  // none of these files is that long
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(fd);
  return text;
}

// The first number in a file ("max", an empty or unreadable file: no limit).
std::uint64_t read_number(const std::string& path) {
  const std::string text = read_small_file(path.c_str());
  if (text.empty() || text.rfind("max", 0) == 0) return kUnlimited;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  return end == text.c_str() || errno != 0 ? kUnlimited : v;
}

std::uint64_t meminfo_available() {
  const std::string text = read_small_file("/proc/meminfo");
  const std::size_t at = text.find("MemAvailable:");
  if (at == std::string::npos) return kUnlimited;
  char* end = nullptr;
  const unsigned long long kib = std::strtoull(text.c_str() + at + 13, &end, 10);
  return end == text.c_str() + at + 13 ? kUnlimited : kib * 1024;
}

// Room under memory.max - memory.current of the process's cgroup and each cgroup above it.
std::uint64_t cgroup_room() {
  const std::string text = read_small_file("/proc/self/cgroup");
  std::string path;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    if (text.compare(start, 3, "0::") == 0) path = text.substr(start + 3, end - start - 3);
    start = end + 1;
  }
  if (path.empty()) return kUnlimited;
  std::uint64_t room = kUnlimited;
  for (;;) {
    const std::string dir = "/sys/fs/cgroup" + (path == "/" ? std::string() : path);
    const std::uint64_t max = read_number(dir + "/memory.max");
    if (max != kUnlimited) {
      // memory.current counts the page cache too; its inactive part is given back under pressure
      // (a job that has just read a large dump is not out of memory).
      std::uint64_t used = read_number(dir + "/memory.current");
      const std::string stat = read_small_file((dir + "/memory.stat").c_str());
      if (const std::size_t at = stat.find("\ninactive_file "); used != kUnlimited && at != std::string::npos) {
        const unsigned long long cache = std::strtoull(stat.c_str() + at + 15, nullptr, 10);
        used = cache < used ? used - cache : 0;
      }
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
  const std::string text = read_small_file("/proc/self/statm");
  char* end = nullptr;
  const unsigned long long pages = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str()) return kUnlimited;
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

void require_disk(const std::string& what, const std::string& folder, std::uint64_t bytes) {
  struct statvfs fs {};
  if (::statvfs(folder.c_str(), &fs) == 0) {
    const std::uint64_t free = static_cast<std::uint64_t>(fs.f_bavail) * static_cast<std::uint64_t>(fs.f_frsize);
    if (bytes > free) {
      throw std::invalid_argument(what + ": needs " + bytes_text(bytes) + " of disk; " + bytes_text(free) + " is free in " + folder +
                                  "; expected a smaller output or more free space");
    }
  }
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && bytes > lim.rlim_cur) {
    throw std::invalid_argument(what + ": needs a file of " + bytes_text(bytes) + "; this process may write files of at most " +
                                bytes_text(lim.rlim_cur) + " (ulimit -f); expected a smaller output");
  }
}

std::string bytes_text(std::uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double x = static_cast<double>(bytes);
  int u = 0;
  while (x >= 1024 && u < 6) x /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", x, units[u]);
  return buf;
}

void require_memory(const std::string& what, std::uint64_t bytes) {
  const std::uint64_t room = available_memory();
  if (bytes <= room) return;
  throw std::invalid_argument(what + ": needs " + bytes_text(bytes) + " of memory; " + bytes_text(room) +
                              " is available on this machine; expected a smaller input (fewer heads, tokens or rows)");
}

}  // namespace qattn
