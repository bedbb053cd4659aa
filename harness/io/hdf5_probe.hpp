#pragma once
// libhdf5 1.10 trusts a file's metadata: one flipped byte can send it reading out of bounds (a
// fuzzer found segfaults in H5HG_read and H5Aread in 14 of 250 byte-flipped files). A corrupt file
// must end in an error naming it, not a crash, so every HDF5 file the lab reads (dumps, a kernel's
// outputs) is read first in a child process; if the child dies, the parent reports the file and
// never parses it itself.
#include <functional>
#include <mutex>
#include <string>

namespace qattn {

// Runs `read` in a forked child. Throws DatasetError naming `path` (and the `schema` it should
// hold) when the child dies or runs past its alarm; an ordinary exception in the child is ignored,
// since the parent meets it again, with its message, when it reads the file itself.
void read_first_in_child(const std::string& path, const std::function<void()>& read, const std::string& schema);

// Every HDF5 call of the lab is made holding this lock, and the probe forks only while holding it:
// a child forked while another thread (the Python bindings release the GIL) is inside libhdf5
// inherits the library's internal state mid-call and can deadlock there. In the probe child (one
// thread) it is a no-op.
std::unique_lock<std::recursive_mutex> hdf5_lock();

}  // namespace qattn
