#include "core/phase_timer.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>

#include "core/kokkos_compat.hpp"

namespace miniattn {

double wall_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

PhaseTimer::Scope::Scope(PhaseTimer& timer, const std::string& phase)
    : timer_(timer), phase_(phase), start_(0.0) {
  compat::fence("miniattn::PhaseTimer::begin");
  Kokkos::Profiling::pushRegion("miniattn::" + phase_);
  start_ = wall_seconds();
}

PhaseTimer::Scope::~Scope() {
  compat::fence("miniattn::PhaseTimer::end");
  timer_.samples_[phase_].push_back(wall_seconds() - start_);
  Kokkos::Profiling::popRegion();
}

double PhaseTimer::total(const std::string& phase) const {
  auto it = samples_.find(phase);
  if (it == samples_.end()) return 0.0;
  double sum = 0.0;
  for (double s : it->second) sum += s;
  return sum;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double PhaseTimer::median(const std::string& phase) const {
  auto it = samples_.find(phase);
  if (it == samples_.end()) return 0.0;
  const auto warm = warm_up_.find(phase);
  const std::size_t skip = warm == warm_up_.end() || warm->second >= it->second.size() ? 0 : warm->second;
  return miniattn::median(std::vector<double>(it->second.begin() + static_cast<std::ptrdiff_t>(skip),
                                              it->second.end()));
}

void PhaseTimer::end_warm_up() {
  for (const auto& [phase, samples] : samples_) warm_up_[phase] = samples.size();
}

}  // namespace miniattn
