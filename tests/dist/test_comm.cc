// dist/comm.h without a launcher: the launch read from the environment, and
// the one-rank Comm that a run outside mpirun gets.
#include "dist/comm.h"

#include <cstdlib>

#include <gtest/gtest.h>

namespace sustain::dist {
namespace {

// Sets (or clears, with nullptr) the launcher variables for one test.
struct Env {
  Env(const char* rank, const char* size) {
    for (const char* k : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMIX_SIZE",
                          "PMI_RANK", "PMI_SIZE"})
      unsetenv(k);
    if (rank) setenv("OMPI_COMM_WORLD_RANK", rank, 1);
    if (size) setenv("OMPI_COMM_WORLD_SIZE", size, 1);
  }
  ~Env() {
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
  }
};

TEST(Launch, NoLauncherIsOneRank) {
  Env e(nullptr, nullptr);
  const Launch l = launch_from_env();
  EXPECT_FALSE(l.under_launcher);
  EXPECT_EQ(l.rank, 0);
  EXPECT_EQ(l.size, 1);
}

TEST(Launch, ReadsOpenMpiRankAndSize) {
  Env e("2", "3");
  const Launch l = launch_from_env();
  EXPECT_TRUE(l.under_launcher);
  EXPECT_EQ(l.rank, 2);
  EXPECT_EQ(l.size, 3);
}

TEST(Launch, MalformedValuesFallBackToOneRank) {
  for (auto [r, s] : {std::pair{"x", "2"}, {"3", "2"}, {"-1", "2"}, {"0", "99999999999"}}) {
    Env e(r, s);
    const Launch l = launch_from_env();
    EXPECT_EQ(l.size, 1) << r << " " << s;
    EXPECT_EQ(l.rank, 0) << r << " " << s;
  }
}

TEST(LocalComm, OneRankCollectivesAreIdentity) {
  auto c = local_comm();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  float x[3] = {1.0f, 2.0f, 3.0f};
  ASSERT_TRUE(c->all_reduce_sum(x, 3).is_ok());
  EXPECT_EQ(x[2], 3.0f);
  std::vector<int32_t> v = {4, 5};
  ASSERT_TRUE(broadcast_vector(*c, v, 0).is_ok());
  EXPECT_EQ(v, (std::vector<int32_t>{4, 5}));
  // No peer to talk to: an error naming the rank, not a hang.
  Status st = c->send(1, x, sizeof x);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("rank 1"), std::string::npos);
}

TEST(MpiComm, WithoutMpiTheErrorNamesTheBuildOption) {
  if (mpi_built()) GTEST_SKIP() << "this build has MPI";
  auto c = mpi_comm();
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.status().message().find("SUSTAIN_MPI"), std::string::npos);
}

}  // namespace
}  // namespace sustain::dist
