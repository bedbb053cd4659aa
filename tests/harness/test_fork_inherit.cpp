// A child forked to read a file first (hdf5_probe.hpp) holds no report folder's lock: had it kept
// its copy of the lock's descriptor, a child outliving a killed parent would hold the folder, and
// the next command (a resume) would be refused it.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "harness/experiment/report_folder.hpp"
#include "harness/io/hdf5_probe.hpp"
#include "tests/catch.hpp"

using namespace qattn;
namespace fs = std::filesystem;

namespace {

// This process's descriptor open on `file`, or -1.
int descriptor_of(const fs::path& file) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator("/proc/self/fd", ec)) {
    std::error_code link_ec;
    if (fs::read_symlink(e.path(), link_ec) == file) return std::stoi(e.path().filename().string());
  }
  return -1;
}

// Runs a probe child that dies (abort: reported as a DatasetError) unless descriptor fd refers to
// `file` in it exactly when `open` (by its link, not fcntl: the child reuses free numbers for
// /dev/null).
void probe(int fd, const fs::path& file, bool open) {
  read_first_in_child("probe", [&] {
    std::error_code ec;
    if ((fs::read_symlink("/proc/self/fd/" + std::to_string(fd), ec) == file) != open) std::abort();
  }, "test");
}

}  // namespace

TEST_CASE("a child forked to read a file first holds no report folder's lock", "[report][untrusted]") {
  const fs::path dir = fs::weakly_canonical(fs::temp_directory_path()) / ("qattn-fork-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  int fd = -1;
  {
    const report::FolderLock lock(dir);
    fd = descriptor_of(dir / ".lock");
    REQUIRE(fd >= 0);
    CHECK_NOTHROW(probe(fd, dir / ".lock", false));
  }
  // Released, the number is no longer the folder's: a descriptor that reuses it stays open in children.
  const int other = ::open((dir / "other").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(other >= 0);
  CHECK(other == fd);  // (the lowest free number: the one the lock gave back)
  CHECK_NOTHROW(probe(other, dir / "other", true));
  ::close(other);
  fs::remove_all(dir);
}
