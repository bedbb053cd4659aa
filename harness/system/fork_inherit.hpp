#pragma once
// Descriptors a child forked without exec must drop at once. A report folder's lock is an flock,
// which lasts while any copy of its descriptor is open: a child forked to read a file first
// (hdf5_probe.hpp) that outlives its parent (the parent killed mid-read) would go on holding the
// folder, and the next command would be refused it. Children started by exec never see them
// (the descriptors are close-on-exec).
namespace qattn {

// Registers fd (at most kMaxDropped at once; std::length_error past that) / takes it off again
// before it is closed.
inline constexpr int kMaxDropped = 64;
void drop_in_forked_children(int fd);
void keep_in_forked_children(int fd);

// In a child just forked: closes every registered descriptor. Async-signal-safe (atomics and
// close only), as the child of a threaded process requires.
void close_dropped_after_fork();

}  // namespace qattn
