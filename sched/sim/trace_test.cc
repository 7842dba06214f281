#include "sched/sim/trace.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tandem::sched::sim {
namespace {

TEST(TraceTest, PoissonTraceIsDeterministicAndHitsTheLoad) {
  const ModelCatalog catalog = ModelCatalog::Reference();
  PoissonTraceOptions options;
  options.num_jobs = 2000;
  options.seed = 7;
  options.load = 0.8;
  auto a = PoissonTrace(options, catalog);
  auto b = PoissonTrace(options, catalog);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), 2000u);
  EXPECT_EQ(TraceToCsv(*a), TraceToCsv(*b));
  double solo = 0;
  for (const TraceJob& job : *a) {
    solo += static_cast<double>(job.iterations) * catalog.Find(job.model).value()->solo_seconds;
    EXPECT_GE(job.iterations, 1);
  }
  // Offered load = total solo work / span of arrivals (within sampling noise).
  const double span = a->back().arrival_seconds - a->front().arrival_seconds;
  EXPECT_NEAR(solo / span, 0.8, 0.08);
  options.seed = 8;
  EXPECT_NE(TraceToCsv(*PoissonTrace(options, catalog)), TraceToCsv(*a));
}

TEST(TraceTest, CsvRoundTrips) {
  const ModelCatalog catalog = ModelCatalog::Reference();
  std::vector<TraceJob> trace(2);
  trace[0] = TraceJob{1, 0.5, "fcn5", 10, 3, 2.0, 0, 0.25, 1, "k"};
  trace[1] = TraceJob{2, 1.5, "vgg19", 20, 0, 1.0, -1, 0, 2, ""};
  auto parsed = ParseTraceCsv(TraceToCsv(trace));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].model, "fcn5");
  EXPECT_EQ((*parsed)[0].priority, 3);
  EXPECT_EQ((*parsed)[0].declared_iterations, 0);
  EXPECT_DOUBLE_EQ((*parsed)[0].think_seconds, 0.25);
  EXPECT_EQ((*parsed)[0].interference_key, "k");
  EXPECT_EQ((*parsed)[1].iterations, 20);
  EXPECT_TRUE(ValidateTrace(*parsed, catalog).ok());
}

TEST(TraceTest, BadTracesSayWhatIsWrong) {
  const ModelCatalog catalog = ModelCatalog::Reference();
  auto parsed = ParseTraceCsv("1,0,fcn5,ten\n");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(std::string(parsed.status().message()).find("iterations"), std::string::npos);
  std::vector<TraceJob> unknown_model = {TraceJob{1, 0, "gpt9", 10}};
  const absl::Status status = ValidateTrace(unknown_model, catalog);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(status.message()).find("gpt9"), std::string::npos);
  std::vector<TraceJob> duplicate = {TraceJob{1, 0, "fcn5", 10}, TraceJob{1, 0, "fcn5", 10}};
  EXPECT_FALSE(ValidateTrace(duplicate, catalog).ok());
}

}  // namespace
}  // namespace tandem::sched::sim
