#pragma once
// The processes of one run: one (the default), or the ranks of an MPI job when a launcher (mpirun,
// srun) started this process and qattn was built with MPI. Only qattn run uses more than one.
// MPI stays in ranks.cpp: nothing else includes it, and a build without MPI has the same API.
#include <exception>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace qattn::ranks {

// Starts MPI if this process was started by an MPI launcher (its environment says so: Open MPI's
// OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK, PMI's PMI_SIZE) and the build has MPI; else one process.
// Call once, first thing in main; Session's destructor ends it.
class Session {
 public:
  Session(int* argc, char*** argv);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

bool sharded();    // more than one process, or one started by a launcher
int rank();        // 0 .. size() - 1
int size();
int local_rank();  // the rank among the processes of this node (GPUs are taken in this order)
// "rank 1 of 3" (or "" for a single process), for messages.
std::string label();

// Each item's rank when `size` ranks share work items of these costs: contiguous runs of about equal
// cost, item i going to the rank whose share holds its cost's midpoint (so a layer's or a window's
// items stay together). `qattn run` and the end-to-end evaluation (qattn.model_eval) share work so.
std::vector<int> cost_shares(std::span<const double> costs, int size);

// Thrown on the ranks whose step succeeded when another rank's failed: that rank reports its error;
// these exit 1 quietly.
struct OtherRankFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A step every rank takes, then agrees on: returns when it succeeded on all. Otherwise the lowest
// failing rank rethrows its own error (prefixed with its label when it is not rank 0: a rank-0 error
// is usually everyone's, such as a bad experiment file, and is printed once) and every other rank
// throws OtherRankFailed. With one process it rethrows `mine`, if any.
void agree(std::exception_ptr mine);
// Work every rank does; then agree on its outcome.
template <class F>
void checked(F&& work) {
  std::exception_ptr err;
  try {
    work();
  } catch (...) {
    err = std::current_exception();
  }
  agree(err);
}
// Rank 0's work while the others wait; then agree on its outcome.
template <class F>
void on_rank0(F&& work) {
  std::exception_ptr err;
  if (rank() == 0) {
    try {
      work();
    } catch (...) {
      err = std::current_exception();
    }
  }
  agree(err);
}

}  // namespace qattn::ranks
