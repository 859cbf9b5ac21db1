// actors/runtime: where this process stands in the job, and what receives the messages other
// processes send it — what ProcessTransport (process_transport.h) and its MPI loop (mpi_loop.h)
// both speak of.
#pragma once

#include <functional>

#include "axle/actors/runtime/message_bytes.h"

namespace axle {

/// Where this process stands in the job.
struct ProcessPlacement {
  int index = 0;        ///< its rank among the job's processes
  int count = 1;        ///< the job's processes
  int local_index = 0;  ///< its rank among the processes on its host
  int local_count = 1;  ///< the processes on its host
  int host_index = 0;   ///< its host, hosts numbered in the order of their lowest rank
  int host_count = 1;
};

/// Receives every message another process sent to this one, on the transport's thread.
using ProcessReceiver = std::function<void(int from, ProcessMessage message)>;

}  // namespace axle
