// Tests engine/log.h. This file's module name, for AXLE_VMODULE, is "log_test".
#include "axle/engine/log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "axle/engine/config.h"

namespace axle {
namespace {

constexpr int kThreads = 4;
constexpr int kLinesPerThread = 500;

// The label is the third space-separated field: "W1121 19:33:36.123456 <label> file:line] ...".
std::string label_of(const std::string& line) {
  std::istringstream fields(line);
  std::string field;
  for (int i = 0; i < 3; ++i) fields >> field;
  return field;
}

// Logs from kThreads threads at once; each message names its thread and index and is long enough
// that a torn write would show.
void log_from_threads() {
  const std::string padding(300, 'x');
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &padding] {
      set_thread_name(fmt::format("writer-{}", t));
      for (int i = 0; i < kLinesPerThread; ++i) AXLE_LOG(WARNING, "line {} {}", i, padding);
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// Checks that `lines` are exactly the whole lines log_from_threads writes, in any interleaving.
void expect_whole_lines_from_threads(const std::vector<std::string>& lines) {
  const std::regex whole(R"(W\d{4} \d{2}:\d{2}:\d{2}\.\d{6} writer-(\d) log_test\.cpp:\d+\] )"
                         R"(line (\d+) x{300})");
  std::set<std::pair<int, int>> seen;
  for (const std::string& line : lines) {
    std::smatch match;
    ASSERT_TRUE(std::regex_match(line, match, whole)) << "torn line: " << line;
    seen.emplace(std::stoi(match[1]), std::stoi(match[2]));
  }
  EXPECT_EQ(lines.size(), static_cast<size_t>(kThreads * kLinesPerThread));
  EXPECT_EQ(seen.size(), static_cast<size_t>(kThreads * kLinesPerThread));
}

bool vlog_two_is_on() { return AXLE_VLOG_IS_ON(2); }

// Captures lines through the sink, starting from known settings whatever the environment says.
class Log : public ::testing::Test {
 protected:
  void SetUp() override {
    config::set("AXLE_LOG_LEVEL", "warning");
    config::set("AXLE_VMODULE", "");
    config::set("AXLE_VLOG_LEVEL", "0");
    reload_log_config();
    set_log_sink([this](LogLevel, std::string_view line) {
      std::lock_guard lock(mutex_);
      lines_.emplace_back(line);
    });
  }

  void TearDown() override {
    set_log_sink(nullptr);
    for (const char* name : {"AXLE_LOG_LEVEL", "AXLE_VMODULE", "AXLE_VLOG_LEVEL"}) {
      config::unset(name);
    }
    try {
      reload_log_config();
    } catch (const ConfigError&) {
      // A malformed value in the environment is not what these tests are about.
    }
  }

  static void configure(const char* name, const char* value) {
    config::set(name, value);
    reload_log_config();
  }

  std::vector<std::string> lines() {
    std::lock_guard lock(mutex_);
    return lines_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

TEST_F(Log, DropsLinesBelowMinimumLevel) {
  configure("AXLE_LOG_LEVEL", "info");
  AXLE_LOG(DEBUG, "debug");
  AXLE_LOG(INFO, "info");
  AXLE_LOG(WARNING, "warning");
  AXLE_LOG(ERROR, "error");
  const std::vector<std::string> written = lines();
  ASSERT_EQ(written.size(), 3u);
  EXPECT_EQ(written[0].front(), 'I');
  EXPECT_TRUE(written[0].ends_with("] info"));
  EXPECT_EQ(written[1].front(), 'W');
  EXPECT_EQ(written[2].front(), 'E');
}

TEST_F(Log, MinimumLevelDefaultsToWarning) {
  configure("AXLE_LOG_LEVEL", "");
  EXPECT_FALSE(log_enabled(LogLevel::kInfo));
  EXPECT_TRUE(log_enabled(LogLevel::kWarning));
}

TEST_F(Log, MinimumLevelAcceptsNamesInAnyCaseAndNumbers) {
  const std::vector<std::pair<const char*, LogLevel>> cases = {
      {"DEBUG", LogLevel::kDebug}, {"Info", LogLevel::kInfo}, {" warning ", LogLevel::kWarning},
      {"error", LogLevel::kError}, {"0", LogLevel::kDebug},   {"3", LogLevel::kError},
      {"warn", LogLevel::kWarning}};
  for (const auto& [text, level] : cases) {
    configure("AXLE_LOG_LEVEL", text);
    EXPECT_TRUE(log_enabled(level)) << text;
    if (level != LogLevel::kDebug) {
      EXPECT_FALSE(log_enabled(static_cast<LogLevel>(static_cast<int>(level) - 1))) << text;
    }
  }
}

TEST_F(Log, ReloadRejectsMalformedLevelNamingItAndKeepsSettings) {
  configure("AXLE_LOG_LEVEL", "info");
  config::set("AXLE_LOG_LEVEL", "loud");
  try {
    reload_log_config();
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("AXLE_LOG_LEVEL='loud'"), std::string::npos)
        << error.what();
  }
  EXPECT_TRUE(log_enabled(LogLevel::kInfo));
}

TEST_F(Log, ReloadRejectsMalformedVmoduleEntryNamingIt) {
  config::set("AXLE_VMODULE", "compiler=1,log_test=lots");
  try {
    reload_log_config();
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("AXLE_VMODULE"), std::string::npos) << message;
    EXPECT_NE(message.find("'log_test=lots'"), std::string::npos) << message;
  }
}

TEST_F(Log, DisabledLinesDoNotEvaluateArguments) {
  configure("AXLE_LOG_LEVEL", "error");
  int evaluations = 0;
  AXLE_LOG(WARNING, "{}", ++evaluations);
  AXLE_VLOG(1, "{}", ++evaluations);
  EXPECT_EQ(evaluations, 0);
  AXLE_LOG(ERROR, "{}", ++evaluations);
  EXPECT_EQ(evaluations, 1);
}

TEST_F(Log, VmoduleSetsVerbosityPerModule) {
  configure("AXLE_VMODULE", "compiler=5,log_test=2");
  AXLE_VLOG(2, "two");
  AXLE_VLOG(3, "three");
  const std::vector<std::string> written = lines();
  ASSERT_EQ(written.size(), 1u);
  EXPECT_TRUE(written[0].ends_with("] two"));
}

TEST_F(Log, VmoduleMatchesGlobsAndFirstMatchWins) {
  configure("AXLE_VMODULE", "log_t*=1,log_test=3");
  EXPECT_TRUE(AXLE_VLOG_IS_ON(1));
  EXPECT_FALSE(AXLE_VLOG_IS_ON(2));
  configure("AXLE_VMODULE", "?og_te?t=2");
  EXPECT_TRUE(AXLE_VLOG_IS_ON(2));
}

TEST_F(Log, VlogLevelAppliesToModulesVmoduleDoesNotName) {
  config::set("AXLE_VMODULE", "compiler=5");
  configure("AXLE_VLOG_LEVEL", "1");
  EXPECT_TRUE(AXLE_VLOG_IS_ON(1));
  EXPECT_FALSE(AXLE_VLOG_IS_ON(2));
}

TEST_F(Log, VlogLinesAreWrittenWhateverTheMinimumLevel) {
  config::set("AXLE_LOG_LEVEL", "error");
  configure("AXLE_VMODULE", "log_test=1");
  AXLE_VLOG(1, "verbose");
  const std::vector<std::string> written = lines();
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(written[0].front(), 'I');
}

TEST_F(Log, ReloadUpdatesCallSitesThatAlreadyCachedVerbosity) {
  configure("AXLE_VMODULE", "log_test=1");
  EXPECT_FALSE(vlog_two_is_on());
  configure("AXLE_VMODULE", "log_test=2");
  EXPECT_TRUE(vlog_two_is_on());
}

TEST_F(Log, LineCarriesLevelTimeLabelFileLineAndMessage) {
  const std::string actor = "compiler#3";
  ScopedLogLabel label(actor);
  const int line = __LINE__ + 1;
  AXLE_LOG(WARNING, "hello {}", 42);
  const std::vector<std::string> written = lines();
  ASSERT_EQ(written.size(), 1u);
  const std::regex layout(R"(W\d{4} \d{2}:\d{2}:\d{2}\.\d{6} compiler#3 log_test\.cpp:)" +
                          std::to_string(line) + R"(\] hello 42)");
  EXPECT_TRUE(std::regex_match(written[0], layout)) << written[0];
}

TEST_F(Log, ScopedLogLabelNestsAndRestores) {
  const std::string outer_name = "outer#1";
  const std::string inner_name = "inner#2";
  AXLE_LOG(WARNING, "before");
  {
    ScopedLogLabel outer(outer_name);
    AXLE_LOG(WARNING, "outer");
    {
      ScopedLogLabel inner(inner_name);
      AXLE_LOG(WARNING, "inner");
    }
    AXLE_LOG(WARNING, "outer again");
  }
  AXLE_LOG(WARNING, "after");
  const std::vector<std::string> written = lines();
  ASSERT_EQ(written.size(), 5u);
  EXPECT_EQ(label_of(written[1]), "outer#1");
  EXPECT_EQ(label_of(written[2]), "inner#2");
  EXPECT_EQ(label_of(written[3]), "outer#1");
  EXPECT_EQ(label_of(written[4]), label_of(written[0]));
  EXPECT_NE(label_of(written[0]), "outer#1");
}

TEST_F(Log, ThreadNameLabelsLinesFromThatThread) {
  std::thread([] {
    set_thread_name("device-1");
    AXLE_LOG(WARNING, "from device");
  }).join();
  const std::vector<std::string> written = lines();
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(label_of(written[0]), "device-1");
}

TEST_F(Log, ActorLabelTakesPrecedenceOverThreadName) {
  std::thread([] {
    set_thread_name("worker-0");
    const std::string actor = "scheduler#1";
    ScopedLogLabel label(actor);
    AXLE_LOG(WARNING, "from actor");
  }).join();
  const std::vector<std::string> written = lines();
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(label_of(written[0]), "scheduler#1");
}

TEST_F(Log, UnnamedThreadsGetDistinctNumberedLabels) {
  for (int i = 0; i < 2; ++i) std::thread([] { AXLE_LOG(WARNING, "unnamed"); }).join();
  const std::vector<std::string> written = lines();
  ASSERT_EQ(written.size(), 2u);
  const std::regex numbered(R"(thread-\d+)");
  EXPECT_TRUE(std::regex_match(label_of(written[0]), numbered)) << written[0];
  EXPECT_TRUE(std::regex_match(label_of(written[1]), numbered)) << written[1];
  EXPECT_NE(label_of(written[0]), label_of(written[1]));
}

TEST_F(Log, ConcurrentLinesReachSinkWhole) {
  log_from_threads();
  expect_whole_lines_from_threads(lines());
}

TEST_F(Log, ConcurrentLinesToStderrStayWhole) {
  set_log_sink(nullptr);
  char path[] = "/tmp/axle_log_test_XXXXXX";
  const int file = mkstemp(path);
  ASSERT_GE(file, 0);
  ASSERT_EQ(fcntl(file, F_SETFL, O_APPEND), 0);
  const int saved_stderr = dup(STDERR_FILENO);
  ASSERT_GE(saved_stderr, 0);
  ASSERT_EQ(dup2(file, STDERR_FILENO), STDERR_FILENO);
  log_from_threads();
  dup2(saved_stderr, STDERR_FILENO);
  close(saved_stderr);
  close(file);

  std::ifstream in(path);
  std::vector<std::string> written;
  for (std::string line; std::getline(in, line);) written.push_back(line);
  std::remove(path);
  expect_whole_lines_from_threads(written);
}

// The settings are read once per process, so this runs in a freshly started child.
TEST(LogDeathTest, MalformedLevelAtStartupLogsOneErrorAndUsesDefault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  config::set("AXLE_LOG_LEVEL", "loud");
  config::set("AXLE_VMODULE", "");
  config::set("AXLE_VLOG_LEVEL", "0");
  // Exactly one error line, then the two WARNING lines and nothing else: a repeated error line, or
  // the INFO line had the level not fallen back to warning, would break the sequence.
  EXPECT_EXIT(
      {
        AXLE_LOG(INFO, "dropped");
        AXLE_LOG(WARNING, "kept 1");
        AXLE_LOG(WARNING, "kept 2");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      "^E[^\n]*AXLE_LOG_LEVEL='loud'[^\n]*\nW[^\n]*\\] kept 1\nW[^\n]*\\] kept 2\n$");
  for (const char* name : {"AXLE_LOG_LEVEL", "AXLE_VMODULE", "AXLE_VLOG_LEVEL"}) {
    config::unset(name);
  }
}

}  // namespace
}  // namespace axle
