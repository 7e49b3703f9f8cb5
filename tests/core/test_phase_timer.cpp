// PhaseTimer: the report's medians leave out the warm-up step, its totals keep it.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/phase_timer.hpp"

namespace {

void spend(miniattn::PhaseTimer& timer, const char* phase, int milliseconds) {
  const auto scope = timer.measure(phase);
  std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds));
}

TEST(PhaseTimer, MediansLeaveOutTheWarmUpTotalsKeepIt) {
  miniattn::PhaseTimer timer;
  spend(timer, "forward", 40);  // a slow first step
  spend(timer, "forward", 40);  // (two calls in it)
  spend(timer, "checkpoint", 5);
  EXPECT_GE(timer.median("forward"), 0.04);
  timer.end_warm_up();
  spend(timer, "forward", 0);
  EXPECT_LT(timer.median("forward"), 0.02);  // the last call alone
  EXPECT_GE(timer.total("forward"), 0.08);
  EXPECT_EQ(timer.samples().at("forward").size(), 3u);
  // A phase with no call after the warm-up keeps its median over all.
  EXPECT_GE(timer.median("checkpoint"), 0.005);
  EXPECT_EQ(timer.median("absent"), 0.0);
}

}  // namespace
