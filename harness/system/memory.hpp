#pragma once
// Sizes checked before allocation. Arrays from other programs (a stride-0 NumPy view, a file's
// declared shape) can describe more elements than an int, a size_t or the machine holds: each count
// is multiplied with overflow checks, and an allocation that cannot fit is refused with the name of
// the argument or file that asked for it, before any memory is touched.
#include <cstdint>
#include <initializer_list>
#include <string>

namespace qattn {

// The product of the factors, or throws std::invalid_argument naming `what` when it exceeds 2^63.
std::uint64_t checked_product(const std::string& what, std::initializer_list<std::uint64_t> factors);

// The sum of the terms, likewise checked.
std::uint64_t checked_sum(const std::string& what, std::initializer_list<std::uint64_t> terms);

// Bytes this process can still allocate without swapping or the out-of-memory killer: the kernel's
// MemAvailable, lowered to the room left under each memory limit of the process's cgroups (v2) and
// under its address-space limit (ulimit -v).
std::uint64_t available_memory();

// Throws std::invalid_argument ("WHAT: needs 48.0 GiB; 20.1 GiB of memory is available here; ...")
// when bytes exceed available_memory().
void require_memory(const std::string& what, std::uint64_t bytes);

// Throws std::invalid_argument ("WHAT: needs 2.1 GiB of disk; ...") when a file of `bytes` cannot be
// written in `folder`: more than the file system's free space for this user, or more than the
// process's file-size limit (ulimit -f). A write that fails half way leaves libhdf5 with a file it
// cannot close, which crashes the process at exit; the room is checked before the file is opened.
void require_disk(const std::string& what, const std::string& folder, std::uint64_t bytes);

// "512 B", "1.5 MiB", "48.0 GiB".
std::string bytes_text(std::uint64_t bytes);

}  // namespace qattn
