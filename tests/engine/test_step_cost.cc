// The step cost model (engine/step_cost.h) the scheduler sizes prefill
// chunks with: it recovers a known linear cost, follows a cost that
// changes, shrugs off a descheduled step, and never predicts a step as
// cheaper for having more work.
#include <gtest/gtest.h>

#include <random>

#include "engine/step_cost.h"

namespace sustain::engine {
namespace {

StepShape decode(int seqs, int64_t depth) {
  StepShape s;
  for (int i = 0; i < seqs; ++i) s.add_run(depth, 1);
  return s;
}

StepShape mixed(int seqs, int64_t depth, int64_t prefill_from, int64_t prefill) {
  StepShape s = decode(seqs, depth);
  s.add_run(prefill_from, prefill);
  return s;
}

// A machine: 4 ms a step, 0.4 ms a token, 2 ns per attended pair.
double truth(const StepShape& s) {
  return 4e-3 + 4e-4 * s.rows + 2e-9 * s.attended;
}

TEST(StepShape, AddRunCountsEveryAttendedPair) {
  StepShape s;
  s.add_run(10, 3);  // positions 10, 11, 12 attend 11 + 12 + 13 keys
  EXPECT_EQ(s.rows, 3);
  EXPECT_DOUBLE_EQ(s.attended, 36.0);
  s.add_run(0, 1);
  EXPECT_EQ(s.rows, 4);
  EXPECT_DOUBLE_EQ(s.attended, 37.0);
}

TEST(StepCostModel, RecoversALinearCostFromMixedSteps) {
  StepCostModel m;
  EXPECT_FALSE(m.ready());
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> seqs(1, 8), chunk(0, 512);
  std::uniform_int_distribution<int64_t> depth(0, 16384);
  std::normal_distribution<double> noise(0.0, 2e-4);
  for (int i = 0; i < 400; ++i) {
    const StepShape s = mixed(seqs(rng), depth(rng), depth(rng), chunk(rng));
    m.observe(s, truth(s) + noise(rng));
  }
  ASSERT_TRUE(m.ready());
  EXPECT_NEAR(m.per_step(), 4e-3, 5e-4);
  EXPECT_NEAR(m.per_row(), 4e-4, 2e-5);
  EXPECT_NEAR(m.per_attended(), 2e-9, 4e-10);
  for (const StepShape& s :
       {decode(4, 100), decode(8, 30000), mixed(4, 2000, 0, 256), mixed(1, 0, 8000, 512)})
    EXPECT_NEAR(m.predict(s), truth(s), 0.03 * truth(s) + 5e-4) << s.rows << " rows";
}

TEST(StepCostModel, NotReadyUntilStepsOfDifferentSizes) {
  StepCostModel m;
  for (int i = 0; i < 50; ++i) m.observe(decode(4, 100 + i), truth(decode(4, 100 + i)));
  EXPECT_FALSE(m.ready()) << "only 4-row steps: the per-token cost is unknown";
  m.observe(mixed(4, 150, 0, 64), truth(mixed(4, 150, 0, 64)));
  EXPECT_TRUE(m.ready());
}

TEST(StepCostModel, FollowsACostThatChanges) {
  StepCostModel m;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> chunk(0, 256);
  for (int i = 0; i < 300; ++i) {
    const StepShape s = mixed(4, 1000, 0, chunk(rng));
    m.observe(s, truth(s));
  }
  // The machine gets twice as slow (another job arrived).
  for (int i = 0; i < 600; ++i) {
    const StepShape s = mixed(4, 1000, 0, chunk(rng));
    m.observe(s, 2 * truth(s));
  }
  const StepShape probe = mixed(4, 1000, 0, 128);
  EXPECT_NEAR(m.predict(probe), 2 * truth(probe), 0.05 * truth(probe));
}

TEST(StepCostModel, OneDescheduledStepDoesNotBendTheFit) {
  StepCostModel m;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> chunk(0, 256);
  std::normal_distribution<double> noise(0.0, 1e-4);
  for (int i = 0; i < 200; ++i) {
    const StepShape s = mixed(4, 1000, 0, chunk(rng));
    m.observe(s, truth(s) + noise(rng));
  }
  const StepShape probe = mixed(4, 1000, 0, 128);
  const double before = m.predict(probe);
  m.observe(decode(4, 1000), 0.5);  // 100× its cost: the OS took the core away
  EXPECT_NEAR(m.predict(probe), before, 0.1 * before);
}

TEST(StepCostModel, PredictionNeverFallsWithMoreWork) {
  StepCostModel m;
  // Steps whose time falls with rows would fit a negative slope; the
  // prediction must still grow (the scheduler bisects on it).
  for (int i = 0; i < 100; ++i) {
    const int64_t n = 16 * (i % 10);
    m.observe(mixed(2, 100, 0, n), 0.02 - 1e-5 * static_cast<double>(n));
  }
  double last = 0;
  for (int64_t n = 0; n <= 1024; n += 32) {
    const double p = m.predict(mixed(2, 100, 0, n));
    EXPECT_GE(p, last) << n;
    EXPECT_GE(p, 0.0);
    last = p;
  }
}

TEST(StepCostModel, IgnoresEmptyAndNonsenseSteps) {
  StepCostModel m;
  m.observe(StepShape{}, 1.0);
  m.observe(decode(1, 10), -1.0);
  m.observe(decode(1, 10), std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(m.observations(), 0);
}

}  // namespace
}  // namespace sustain::engine
