#include "harness/system/fork_inherit.hpp"

#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <string>

namespace qattn {

namespace {

// Lock-free slots (-1: free): a child forked while another thread registers a descriptor reads
// them without a mutex that thread might hold.
std::atomic<int> slots[kMaxDropped] = {};
std::atomic<bool> slots_ready{false};

void init_slots() {
  static const bool once = [] {
    for (std::atomic<int>& s : slots) s.store(-1);
    slots_ready.store(true);
    return true;
  }();
  (void)once;
}

}  // namespace

void drop_in_forked_children(int fd) {
  init_slots();
  for (std::atomic<int>& s : slots) {
    int free_slot = -1;
    if (s.compare_exchange_strong(free_slot, fd)) return;
  }
  throw std::length_error("more than " + std::to_string(kMaxDropped) + " report folders held at once by one process");
}

void keep_in_forked_children(int fd) {
  init_slots();
  for (std::atomic<int>& s : slots) {
    int held = fd;
    if (s.compare_exchange_strong(held, -1)) return;
  }
}

void close_dropped_after_fork() {
  if (!slots_ready.load()) return;
  for (std::atomic<int>& s : slots)
    if (const int fd = s.load(); fd >= 0) ::close(fd);
}

}  // namespace qattn
