#include "sched/interference.h"

#include <cmath>

#include "gtest/gtest.h"
#include "sched/overlap_meter.h"

namespace tandem::sched {
namespace {

TEST(OverlapMeterTest, CountsAloneTimeAndPartnerTime) {
  OverlapMeter meter;
  meter.Start(0, /*key=*/7, 0.0);
  meter.Start(1, /*key=*/8, 1.0);  // lane 0 alone for 1 s
  meter.Start(2, /*key=*/8, 2.0);  // then beside one key-8 iteration for 1 s
  EXPECT_EQ(meter.RunningCount(), 3);
  const OverlapMeter::Sample sample = meter.Finish(0, 4.0);  // then beside two for 2 s
  EXPECT_DOUBLE_EQ(sample.wall_seconds, 4.0);
  EXPECT_DOUBLE_EQ(sample.alone_seconds, 1.0);
  ASSERT_EQ(sample.partner_seconds.size(), 1u);
  EXPECT_EQ(sample.partner_seconds[0].first, 8);
  EXPECT_DOUBLE_EQ(sample.partner_seconds[0].second, 1.0 + 2 * 2.0);
  EXPECT_FALSE(sample.was_paused);
  EXPECT_EQ(meter.RunningCount(), 2);
}

TEST(OverlapMeterTest, APausedIterationNeitherRunsNorCountsAsAPartner) {
  OverlapMeter meter;
  meter.Start(0, 1, 0.0);
  meter.Start(1, 2, 0.0);
  meter.Pause(1, 1.0);
  EXPECT_EQ(meter.RunningCount(), 1);
  const OverlapMeter::Sample zero = meter.Finish(0, 3.0);
  EXPECT_DOUBLE_EQ(zero.alone_seconds, 2.0);
  EXPECT_DOUBLE_EQ(zero.partner_seconds[0].second, 1.0);
  meter.Resume(1, 3.5);
  const OverlapMeter::Sample one = meter.Finish(1, 4.0);
  EXPECT_TRUE(one.was_paused);
  EXPECT_DOUBLE_EQ(one.wall_seconds, 4.0);
  EXPECT_FALSE(meter.Busy(1));
}

OverlapMeter::Sample Sample(double wall, std::vector<std::pair<int, double>> partners) {
  OverlapMeter::Sample s;
  s.wall_seconds = wall;
  double overlapped = 0;
  for (const auto& p : partners) overlapped += p.second;
  s.alone_seconds = std::max(0.0, wall - overlapped);
  s.partner_seconds = std::move(partners);
  return s;
}

TEST(InterferenceEstimatesTest, SoloAndPairSamples) {
  InterferenceEstimates estimates(/*min_samples=*/3);
  const int a = estimates.Intern("a");
  const int b = estimates.Intern("b");
  EXPECT_EQ(estimates.Intern("a"), a);
  EXPECT_EQ(estimates.Find("b"), b);
  EXPECT_FALSE(estimates.Find("c").has_value());
  for (int i = 0; i < 2; ++i) estimates.AddSample(a, Sample(0.010, {}), 0.010);
  EXPECT_FALSE(estimates.Solo(a).has_value()) << "not trusted before 3 samples";
  // Beside b before a's solo time is trusted: not a sample.
  estimates.AddSample(a, Sample(0.015, {{b, 0.015}}), 0.015);
  EXPECT_EQ(estimates.PairSamples(a, b), 0u);
  estimates.AddSample(a, Sample(0.010, {}), 0.010);
  ASSERT_TRUE(estimates.Solo(a).has_value());
  EXPECT_NEAR(*estimates.Solo(a), 0.010, 1e-12);
  // Fully beside b at 1.5x; half beside b at 1.25x — both say r = 1.5.
  estimates.AddSample(a, Sample(0.015, {{b, 0.015}}), 0.015);
  estimates.AddSample(a, Sample(0.0125, {{b, 0.00625}}), 0.0125);
  estimates.AddSample(a, Sample(0.015, {{b, 0.015}}), 0.015);
  ASSERT_TRUE(estimates.R(a, b).has_value());
  EXPECT_NEAR(*estimates.R(a, b), 1.5, 1e-9);
  EXPECT_FALSE(estimates.R(b, a).has_value());
  EXPECT_FALSE(estimates.SideBySidePays(a, b, 0).has_value()) << "b's side is unmeasured";
}

TEST(InterferenceEstimatesTest, PausedAndBarelyOverlappedSamplesDoNotMislead) {
  InterferenceEstimates estimates(1);
  const int a = estimates.Intern("a");
  const int b = estimates.Intern("b");
  // Paused beside b for part of its run: its wall time (0.050 s, pauses
  // included) tells neither a's solo time nor r(a, b).
  OverlapMeter::Sample paused = Sample(0.050, {{b, 0.004}});
  paused.was_paused = true;
  estimates.AddSample(a, paused, 0.012);
  EXPECT_FALSE(estimates.Solo(a).has_value());
  EXPECT_EQ(estimates.PairSamples(a, b), 0u);
  estimates.AddSample(a, Sample(0.010, {}), 0.010);
  estimates.AddSample(a, Sample(0.012, {{b, 0.002}}), 0.012);  // 17% overlap: too little
  EXPECT_EQ(estimates.PairSamples(a, b), 0u);
  EXPECT_NEAR(*estimates.Solo(a), 0.010, 1e-12);
}

// A segmented solo probe pauses while the jobs it held up run, and runs
// alone otherwise: its device time (its segments') is a solo sample.
TEST(InterferenceEstimatesTest, APausedIterationThatRanAloneIsASoloSample) {
  InterferenceEstimates estimates(1);
  const int a = estimates.Intern("a");
  OverlapMeter::Sample probe = Sample(0.080, {});
  probe.was_paused = true;
  estimates.AddSample(a, probe, 0.028);
  ASSERT_TRUE(estimates.Solo(a).has_value());
  EXPECT_NEAR(*estimates.Solo(a), 0.028, 1e-12);
}

// Three co-runner keys at once (four lanes busy): the estimator recovers
// each pair's r from mixed samples drawn from the additive model.
TEST(InterferenceEstimatesTest, RecoversPairsFromMultiPartnerSamples) {
  InterferenceEstimates estimates(3);
  const int a = estimates.Intern("a");
  const int keys[3] = {estimates.Intern("b"), estimates.Intern("c"), estimates.Intern("d")};
  const double truth[3] = {1.3, 1.8, 2.4};
  const double solo = 0.020;
  for (int i = 0; i < 3; ++i) estimates.AddSample(a, Sample(solo, {}), solo);
  // Partner mixes cycle over subsets of size 2 and 3, with repeats of one key.
  const std::vector<std::vector<std::pair<int, double>>> mixes = {{{0, 1}, {1, 1}},         {{1, 1}, {2, 1}},
                                                                  {{0, 1}, {2, 1}},         {{0, 2}, {1, 1}},
                                                                  {{0, 1}, {1, 1}, {2, 1}}, {{2, 2}, {0, 1}}};
  for (int round = 0; round < 400; ++round) {
    const auto& mix = mixes[round % mixes.size()];
    double slowdown = 1;
    for (const auto& [k, count] : mix) slowdown += count * (truth[k] - 1);
    const double t = solo * slowdown;
    std::vector<std::pair<int, double>> partners;
    for (const auto& [k, count] : mix) partners.emplace_back(keys[k], count * t);
    estimates.AddSample(a, Sample(t, partners), t);
  }
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE(estimates.R(a, keys[k]).has_value());
    EXPECT_NEAR(*estimates.R(a, keys[k]), truth[k], 0.02 * truth[k]) << "partner " << k;
  }
}

TEST(InterferenceEstimatesTest, SideBySidePaysFollowsTheAggregateThroughput) {
  InterferenceEstimates estimates(1);
  const int a = estimates.Intern("a");
  const int b = estimates.Intern("b");
  const int c = estimates.Intern("c");
  for (int k : {a, b, c}) estimates.AddSample(k, Sample(1.0, {}), 1.0);
  estimates.AddSample(a, Sample(1.4, {{b, 1.4}}), 1.4);  // r(a,b) = 1.4
  estimates.AddSample(b, Sample(1.6, {{a, 1.6}}), 1.6);  // r(b,a) = 1.6: 0.714 + 0.625 > 1
  estimates.AddSample(a, Sample(2.5, {{c, 2.5}}), 2.5);  // r(a,c) = 2.5
  estimates.AddSample(c, Sample(1.7, {{a, 1.7}}), 1.7);  // r(c,a) = 1.7: 0.4 + 0.59 < 1
  EXPECT_EQ(estimates.SideBySidePays(a, b, 0.02), true);
  EXPECT_EQ(estimates.SideBySidePays(a, c, 0.02), false);
  EXPECT_EQ(estimates.SideBySidePays(a, b, 0.5), false) << "a margin raises the bar";
  estimates.Forget(c);
  EXPECT_FALSE(estimates.R(a, c).has_value());
  EXPECT_FALSE(estimates.Find("c").has_value());
  EXPECT_EQ(estimates.Pairs().size(), 2u);
}

}  // namespace
}  // namespace tandem::sched
