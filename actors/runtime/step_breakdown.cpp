// actors: the replicas' step accounts and the report of their averages.
#include "axle/actors/runtime/step_breakdown.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace axle {
namespace {

// What a report printed last, per account: the next one covers the steps since.
using Window = std::unordered_map<const StepBreakdown*, StepBreakdown::Totals>;

struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<StepBreakdown>> accounts;
  Window user;
  Window metrics_file;
};

Registry& registry() {
  static Registry* r = new Registry;  // devices may add to accounts during static destruction
  return *r;
}

std::string report(Registry& r, Window& window) {
  static constexpr const char* kNames[StepBreakdown::kParts] = {
      "tracing", "input", "values", "compiler", "execute", "collect.", "closures", "device"};
  std::string text = fmt::format("{:<12}{:>7}", "ms/step", "steps");
  for (const char* name : kNames) text += fmt::format("{:>10}", name);
  text += '\n';
  for (const std::shared_ptr<StepBreakdown>& account : r.accounts) {
    const StepBreakdown::Totals now = account->totals();
    StepBreakdown::Totals& before = window[account.get()];
    const int64_t steps = now.steps - before.steps;
    if (steps > 0) {
      text += fmt::format("{:<12}{:>7}", account->owner(), steps);
      for (int p = 0; p < StepBreakdown::kParts; ++p) {
        const auto ns = static_cast<double>(now.ns[p] - before.ns[p]);
        text += fmt::format("{:>10.3f}", ns / 1e6 / static_cast<double>(steps));
      }
      text += '\n';
    }
    before = now;
  }
  return text;
}

}  // namespace

StepBreakdown::Totals StepBreakdown::totals() const noexcept {
  Totals t;
  for (int p = 0; p < kParts; ++p) t.ns[p] = ns_[p].load(std::memory_order_relaxed);
  t.steps = steps_.load(std::memory_order_relaxed);
  return t;
}

std::shared_ptr<StepBreakdown> new_step_account(std::string owner) {
  auto made = std::make_shared<StepBreakdown>(std::move(owner));
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.accounts.push_back(made);
  return made;
}

std::string step_report() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return report(r, r.user);
}

namespace detail {
std::string metrics_file_step_report() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return report(r, r.metrics_file);
}
}  // namespace detail

}  // namespace axle
