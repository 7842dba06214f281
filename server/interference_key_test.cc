#include "server/interference_key.h"

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::server {
namespace {

// A node with many attributes, inserted in the given order.
v1::Graph GraphWithAttrs(const std::vector<std::string>& order, int64_t value = 1) {
  v1::Graph g;
  v1::TensorSpec* feed = g.add_feeds();
  feed->set_name("x");
  feed->set_dtype(v1::FLOAT32);
  feed->add_shape(4);
  v1::Node* node = g.add_nodes();
  node->set_op("sum.dim_IntList");
  node->add_inputs("x");
  node->add_outputs("y");
  for (const std::string& name : order) (*node->mutable_attrs())[name].set_i(value);
  g.add_fetches("y");
  return g;
}

std::vector<std::string> Names(int n) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back("attr" + std::to_string(i));
  return names;
}

TEST(InterferenceKey, EqualGraphsShareAKeyHoweverTheyWereBuilt) {
  std::vector<std::string> forward = Names(24);
  std::vector<std::string> backward(forward.rbegin(), forward.rend());
  const std::string key = InterferenceKey(GraphWithAttrs(forward));
  // Built in another order, and parsed back from bytes (as the daemon gets
  // it), many times over: map iteration order differs between messages.
  std::set<std::string> keys;
  for (int i = 0; i < 50; ++i) {
    keys.insert(InterferenceKey(GraphWithAttrs(i % 2 == 0 ? forward : backward)));
    v1::Graph parsed;
    ASSERT_TRUE(parsed.ParseFromString(GraphWithAttrs(backward).SerializeAsString()));
    keys.insert(InterferenceKey(parsed));
  }
  EXPECT_EQ(keys.size(), 1u);
  EXPECT_EQ(*keys.begin(), key);
}

TEST(InterferenceKey, DifferentGraphsGetDifferentKeys) {
  const std::vector<std::string> names = Names(4);
  EXPECT_NE(InterferenceKey(GraphWithAttrs(names, 1)), InterferenceKey(GraphWithAttrs(names, 2)));
  v1::Graph wider = GraphWithAttrs(names);
  wider.mutable_feeds(0)->set_shape(0, 8);
  EXPECT_NE(InterferenceKey(GraphWithAttrs(names)), InterferenceKey(wider));
}

}  // namespace
}  // namespace tandem::server
