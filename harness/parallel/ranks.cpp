#include "harness/parallel/ranks.hpp"

#include <algorithm>
#include <cmath>

#include <cstdlib>

#if defined(QATTN_WITH_MPI)
#include <mpi.h>
#endif

namespace qattn::ranks {

namespace {

struct State {
  bool mpi = false;
  int rank = 0, size = 1, local_rank = 0;
};
State g;

bool started_by_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

}  // namespace

Session::Session(int* argc, char*** argv) {
#if defined(QATTN_WITH_MPI)
  if (!started_by_launcher()) return;
  int provided = 0;
  // Funneled: only the main thread calls MPI; OpenMP threads compute between the calls.
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  g.mpi = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g.size);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g.rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &g.local_rank);
  MPI_Comm_free(&node);
#else
  (void)argc;
  (void)argv;
#endif
}

Session::~Session() {
#if defined(QATTN_WITH_MPI)
  if (g.mpi) MPI_Finalize();
#endif
}

bool sharded() { return g.mpi; }
int rank() { return g.rank; }
int size() { return g.size; }
int local_rank() { return g.local_rank; }
std::string label() { return g.mpi ? "rank " + std::to_string(g.rank) + " of " + std::to_string(g.size) : ""; }

void agree(std::exception_ptr mine) {
#if defined(QATTN_WITH_MPI)
  if (g.mpi) {
    int first = mine ? g.rank : g.size, lowest = g.size;
    MPI_Allreduce(&first, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (lowest == g.size) return;
    if (lowest != g.rank) throw OtherRankFailed(label() + ": stopped because rank " + std::to_string(lowest) + " failed");
    if (g.rank == 0) std::rethrow_exception(mine);
    try {
      std::rethrow_exception(mine);
    } catch (const std::exception& e) {
      throw std::runtime_error(label() + ": " + e.what());
    }
  }
#endif
  if (mine) std::rethrow_exception(mine);
}

std::vector<int> cost_shares(std::span<const double> costs, int size) {
  if (size < 1) throw std::invalid_argument("cost_shares: " + std::to_string(size) + " ranks; expected at least 1");
  double total = 0, before = 0;
  for (const double c : costs) {
    if (!(c >= 0) || !std::isfinite(c)) throw std::invalid_argument("cost_shares: a cost of " + std::to_string(c) + "; expected finite costs >= 0");
    total += c;
  }
  if (total == 0) total = 1;
  std::vector<int> owners;
  owners.reserve(costs.size());
  for (const double c : costs) {
    owners.push_back(std::min(size - 1, static_cast<int>((before + c / 2) / total * size)));
    before += c;
  }
  return owners;
}

}  // namespace qattn::ranks
