// Command lines that start two copies of a program under torchrun or mpirun on this machine,
// each under `timeout`, for the launcher tests and benchmarks.
#pragma once

#include "support/ports.h"
#include "support/scratch.h"

#include <unistd.h>
#include <string>

namespace arc::testing {

/// torchrun on a free port with `flags`; Debian's torchrun (torch 1.13 on Python 3.11) crashes at
/// start without -r/-t.
inline std::string torchrun(const std::string& program, const std::string& flags = "") {
  return "timeout 120 torchrun -r 9:1 -t 9:1 " + torchrun_log_dir() + " --nproc_per_node 2 --master_port " +
         std::to_string(free_port()) + " " + flags + " --no_python " + program;
}

/// OpenMPI's mpirun, which as root needs --allow-run-as-root.
inline std::string mpirun(const std::string& program) {
  return std::string("timeout 120 mpirun") + (getuid() == 0 ? " --allow-run-as-root" : "") + " --oversubscribe -np 2 " +
         program;
}

}  // namespace arc::testing
