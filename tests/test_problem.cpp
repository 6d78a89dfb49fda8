#include <gtest/gtest.h>

#include "optpipe/problem.h"
#include "optpipe/units.h"

using namespace optpipe;

TEST(Problem, DefaultIsValid) {
  Problem p = default_problem();
  EXPECT_TRUE(check_problem(p).ok()) << check_problem(p).message;
  EXPECT_EQ(p.num_stages(), 4);
}

TEST(Problem, PlacementMaps) {
  UniformSpec u;
  u.num_devices = 4;
  u.placement = Placement::kVShape;
  u.chunks_per_device = 2;
  Problem v = make_uniform_problem(u);
  const int want_v[8] = {0, 1, 2, 3, 3, 2, 1, 0};
  for (int s = 0; s < 8; s++) EXPECT_EQ(v.device_of(s), want_v[s]) << s;
  u.placement = Placement::kInterleaved;
  u.chunks_per_device = 3;
  Problem i = make_uniform_problem(u);
  for (int s = 0; s < 12; s++) EXPECT_EQ(i.device_of(s), s % 4) << s;
}

TEST(Problem, CheckNamesTheField) {
  Problem p = default_problem();
  p.stages[2].t_b_us = -1;
  Status s = check_problem(p);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message.find("stages[2].t_b_us"), std::string::npos) << s.message;

  p = default_problem();
  p.stages[1].act_w_bytes += 5;
  s = check_problem(p);
  EXPECT_NE(s.message.find("stages[1]"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("must be 0"), std::string::npos) << s.message;

  p = default_problem();
  p.devices.pop_back();
  s = check_problem(p);
  EXPECT_NE(s.message.find("devices"), std::string::npos) << s.message;

  p = default_problem();
  p.num_devices = 0;
  s = check_problem(p);
  EXPECT_NE(s.message.find("num_devices"), std::string::npos) << s.message;

  p = default_problem();
  p.placement = Placement::kVShape;  // needs v = 2
  s = check_problem(p);
  EXPECT_NE(s.message.find("chunks_per_device"), std::string::npos) << s.message;
}

TEST(Problem, RechunkSplitsAndMerges) {
  Problem p = default_problem();
  p.stages[0].t_f_us = 3000;  // a heavier first stage stays heavier after the split
  Result<Problem> v = rechunk(p, Placement::kVShape, 2);
  ASSERT_TRUE(v.ok()) << v.status.message;
  ASSERT_EQ(v.value.num_stages(), 8);
  EXPECT_DOUBLE_EQ(v.value.stages[0].t_f_us, 1500);
  EXPECT_DOUBLE_EQ(v.value.stages[1].t_f_us, 1500);
  EXPECT_DOUBLE_EQ(v.value.stages[2].t_f_us, p.stages[1].t_f_us / 2);
  for (const StageSpec& st : v.value.stages) EXPECT_EQ(st.act_f_bytes + st.act_b_bytes + st.act_w_bytes, 0);
  Result<Problem> back = rechunk(v.value, Placement::kLinear, 1);
  ASSERT_TRUE(back.ok()) << back.status.message;
  EXPECT_DOUBLE_EQ(back.value.stages[0].t_f_us, 3000);
  EXPECT_EQ(back.value.stages[1].act_f_bytes, p.stages[1].act_f_bytes);

  UniformSpec u;
  u.num_devices = 3;
  Problem three = make_uniform_problem(u);
  Result<Problem> bad = rechunk(three, Placement::kInterleaved, 3);  // 3 → 9: fine
  EXPECT_TRUE(bad.ok());
  Problem six = make_uniform_problem(u);
  six.num_devices = 3;
  Result<Problem> odd = rechunk(bad.value, Placement::kInterleaved, 2);  // 9 → 6: neither divides
  EXPECT_FALSE(odd.ok());
}

TEST(Units, ParseAndFormatBytes) {
  int64_t b = 0;
  EXPECT_TRUE(parse_bytes("60GiB", &b));
  EXPECT_EQ(b, 60ll << 30);
  EXPECT_TRUE(parse_bytes("1.5 GB", &b));
  EXPECT_EQ(b, 1500000000);
  EXPECT_TRUE(parse_bytes("4096", &b));
  EXPECT_EQ(b, 4096);
  EXPECT_FALSE(parse_bytes("sixty", &b));
  EXPECT_FALSE(parse_bytes("-1GiB", &b));
  EXPECT_FALSE(parse_bytes("5 parsecs", &b));
  EXPECT_EQ(format_bytes(52ll << 30), "52.00 GiB");
  EXPECT_EQ(format_bytes(512 << 20), "512.0 MiB");
}

TEST(Problem, RejectsWhatWouldOverflowOrMisbehave) {
  Problem p = default_problem();
  EXPECT_FALSE(rechunk(p, Placement::kInterleaved, 500000000).ok());  // refused before building anything
  EXPECT_FALSE(rechunk(p, Placement::kVShape, 3).ok());
  p.stages[0].act_w_bytes = 10;  // W may only free
  p.stages[0].act_b_bytes = -p.stages[0].act_f_bytes - 10;
  EXPECT_NE(check_problem(p).message.find("stages[0].act_w_bytes: must be ≤ 0"), std::string::npos);
  Problem big = default_problem();
  big.num_microbatches = 100000;
  for (StageSpec& st : big.stages) {
    st.act_f_bytes = int64_t{1} << 49;
    st.act_w_bytes = 0;
    st.act_b_bytes = -st.act_f_bytes;
  }
  EXPECT_NE(check_problem(big).message.find("problem too large"), std::string::npos);
}

TEST(Problem, EveryActivationBytesAndWorkCountTheDevicesStages) {
  UniformSpec u;
  u.num_devices = 4;
  u.num_microbatches = 8;
  const Problem linear = make_uniform_problem(u);
  EXPECT_EQ(linear.every_activation_bytes(0), 8 * u.act_f_bytes);
  EXPECT_DOUBLE_EQ(linear.work_us(0), 8 * (u.t_f_us + u.t_b_us + u.t_w_us));
  Result<Problem> v = rechunk(linear, Placement::kVShape, 2);
  ASSERT_TRUE(v.ok()) << v.status.message;
  EXPECT_EQ(v.value.every_activation_bytes(3), v.value.stages[3].act_f_bytes * 8 + v.value.stages[4].act_f_bytes * 8);
  // Device 3 holds chunks 3 and 4 of the V, half a layer's worth each: the same work as before.
  EXPECT_DOUBLE_EQ(v.value.work_us(3), linear.work_us(3));
}
