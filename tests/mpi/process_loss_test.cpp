// A job whose process dies or whose replica throws ends, never hangs: under mpirun (2 processes of
// 2 devices), a killed process makes the other fail within the collective timeout with an error
// naming the replicas it lost, their process and the collective it waited in, and mpirun exits
// non-zero; a replica that throws, also mid-step under FSDP, cancels every replica of the job,
// naming it; and an SPMD process that throws ends the job as well.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <regex>
#include <string>

namespace {

struct Job {
  std::string output;
  int status = -1;
  double seconds = 0;
};

Job run(const std::string& how) {
  // A job that hangs fails the test with what it printed, well before CTest's own timeout.
  const std::string command = "timeout -k 10 120 " + std::string(AXLE_MPIEXEC) +
                              " --allow-run-as-root --oversubscribe --bind-to none -np 2 -x "
                              "CPU_NUM_DEVICES=2 -x AXLE_COLLECTIVE_TIMEOUT=3 " +
                              AXLE_WORKER + " " + how + " 2>&1";
  Job job;
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return job;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe)) job.output += buffer.data();
  job.status = ::pclose(pipe);
  job.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return job;
}

TEST(ProcessLoss, AKilledProcessEndsTheJobAndTheOthersSayWhatTheyWaitedFor) {
  const Job job = run("kill");
  EXPECT_NE(job.status, 0) << job.output;
  EXPECT_LT(job.seconds, 60) << job.output;
  EXPECT_NE(job.output.find("rank 1"), std::string::npos) << job.output;  // mpirun names it
  // The survivor, stopped by mpirun, names the collective and the replicas it still waited for.
  EXPECT_NE(job.output.find("axle: process 0 was stopped by mpirun (a process of the job ended) "
                            "while waiting in all_reduce 'f32[4] -> f32[4]' among replicas "
                            "{0, 1, 2, 3} for replicas {2, 3} of process {1}"),
            std::string::npos)
      << job.output;
}

// A job in which replica 3 (in process 1) threw: it ended in time, every process failed, and
// the others name replica 3.
void expect_replica_3_cancelled_every_process(const Job& job) {
  EXPECT_NE(job.status, 0) << job.output;
  EXPECT_LT(job.seconds, 60) << job.output;
  EXPECT_NE(job.output.find("process 1 failed: replica 3 of 4 (xla:1) failed: replica gave up"),
            std::string::npos)
      << job.output;
  EXPECT_NE(job.output.find("process 0 failed"), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("replica 3 failed: replica gave up"), std::string::npos) << job.output;
}

TEST(ProcessLoss, AReplicaThatThrowsCancelsEveryProcess) {
  expect_replica_3_cancelled_every_process(run("throw"));
}

// Under FullyShardedDataParallel: a replica that throws mid-step cancels every replica of the
// job, in both processes, naming it.
TEST(ProcessLoss, AnFsdpReplicaThatThrowsMidStepCancelsEveryProcess) {
  const Job job = run("fsdp-throw");
  expect_replica_3_cancelled_every_process(job);
  // The others were cancelled in one of the step's gathers or reduce-scatters.
  EXPECT_TRUE(std::regex_search(
      job.output, std::regex("process 0 failed: .*(all_gather|reduce_scatter) '[^']*' "
                             "cancelled: replica 3 failed: replica gave up")))
      << job.output;
}

// Under use_spmd() over the job's devices: a process that throws between steps ends the job; the
// other, waiting in the partitioned program's all-reduce across the processes, names it and the
// process it waited for (as mpirun stops it, or at its own timeout on a loaded machine).
TEST(ProcessLoss, AnSpmdProcessThatThrowsEndsTheJob) {
  const Job job = run("spmd-throw");
  EXPECT_NE(job.status, 0) << job.output;
  EXPECT_LT(job.seconds, 60) << job.output;
  EXPECT_NE(job.output.find("process 1 failed: process gave up at step 3"), std::string::npos)
      << job.output;
  const std::size_t waited =
      job.output.find("all_reduce 'f32[] -> f32[]' among replicas {0, 1, 2, 3}");
  ASSERT_NE(waited, std::string::npos) << job.output;
  EXPECT_NE(job.output.find("process {1}", waited), std::string::npos) << job.output;
}

}  // namespace
