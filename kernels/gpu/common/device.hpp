#pragma once
// Which GPU this process uses. A sharded run (qattn run under mpirun) starts one process per GPU:
// the processes of a node take the node's GPUs in order.
#include <string>

namespace qattn::gpu {

// Makes GPU (local_rank mod count) current for this process and returns its index; throws when the
// machine has no GPU.
int select_device(int local_rank);
// Why this process cannot use a GPU ("" when it can): no device visible, or the runtime's own error
// (no driver, a driver older than the toolkit), said in words a user can act on.
std::string unusable_reason();
// "GPU i of n: <name>", for logs.
std::string device_description();

}  // namespace qattn::gpu
