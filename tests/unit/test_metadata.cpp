// User metadata (Model.metadata; `ferry convert --meta`): the converter's
// parsing of KEY=VALUE words and its limits, the writer -> loader -> C API
// round trip, and the loader's refusal of entries that break the rules
// (written as they are by the writer, which does not check: convert does).
#ifdef FERRY_HAVE_CONVERTER

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "error.h"
#include "ferry/ferry.h"
#include "ferry/ferry_generated.h"
#include "plan/user_metadata.h"
#include "random_models.h"

namespace ferry::test {
namespace {

using conv::LayerOp;
using conv::MetaValue;

MetaValue text(const std::string& key, const std::string& value) {
  MetaValue v;
  v.key = key;
  v.text = value;
  return v;
}

MetaValue numbers(const std::string& key, std::vector<double> values, std::vector<uint32_t> shape) {
  MetaValue v;
  v.key = key;
  v.is_text = false;
  v.numbers = std::move(values);
  v.shape = std::move(shape);
  return v;
}

std::vector<uint8_t> model_with(const std::vector<MetaValue>& metadata) {
  ModelSpec spec;
  spec.layers = {{LayerOp::GRU, 8}, {LayerOp::Last}, {LayerOp::Linear, 3}};
  conv::ModelPlan plan = make_plan(spec);
  plan.metadata = metadata;
  return conv::build_model(plan).to_vector();
}

struct Loaded {
  AlignedBytes bytes;
  ferry_model* model = nullptr;
  ferry_status status;
  std::string error;
  explicit Loaded(const std::vector<uint8_t>& b) : bytes(b.data(), b.size()) {
    status = ferry_model_load(bytes.data(), bytes.size(), nullptr, &model);
    if (status != FERRY_OK) error = ferry_last_error();
  }
  ~Loaded() { ferry_model_free(model); }
};

TEST(Metadata, ParsesEachKindOfValue) {
  MetaValue v = conv::parse_meta("sample_rate=16000");
  EXPECT_FALSE(v.is_text);
  EXPECT_EQ(v.numbers, std::vector<double>{16000});
  EXPECT_TRUE(v.shape.empty());
  v = conv::parse_meta("mean=0.5,-1.25,3e2");
  EXPECT_FALSE(v.is_text);
  EXPECT_EQ(v.numbers, (std::vector<double>{0.5, -1.25, 300}));
  EXPECT_EQ(v.shape, std::vector<uint32_t>{3});
  v = conv::parse_meta("version=text:1.0");
  EXPECT_TRUE(v.is_text);
  EXPECT_EQ(v.text, "1.0");
  v = conv::parse_meta("task=keyword spotting, 12 words");
  EXPECT_TRUE(v.is_text);
  EXPECT_EQ(v.text, "keyword spotting, 12 words");
  v = conv::parse_meta("empty=");
  EXPECT_TRUE(v.is_text);
  EXPECT_EQ(v.text, "");
  EXPECT_TRUE(conv::parse_meta("x=nan").is_text);   // not a finite decimal
  EXPECT_TRUE(conv::parse_meta("x=0x10").is_text);  // no hex
  const std::string path = ::testing::TempDir() + "/labels.txt";
  std::ofstream(path) << "yes\nno\nunknown\n";
  v = conv::parse_meta("labels=@" + path);
  EXPECT_TRUE(v.is_text);
  EXPECT_EQ(v.text, "yes\nno\nunknown\n");
}

void expect_refused(const std::string& word, const std::string& words) {
  try {
    conv::parse_meta(word);
    ADD_FAILURE() << word << " was accepted";
  } catch (const conv::Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(Metadata, RefusesWhatBreaksTheRules) {
  expect_refused("no_equals", "expected KEY=VALUE");
  expect_refused("=1", "the key must be");
  expect_refused("bad key=1", "the key must be");
  expect_refused(std::string(65, 'k') + "=1", "the key must be");
  expect_refused("x=@", "names no file");
  expect_refused("x=@/nonexistent/labels.txt", "/nonexistent/labels.txt");
  expect_refused("x=text:\xff\xfe", "not UTF-8");
  const std::string big = ::testing::TempDir() + "/big.txt";
  std::ofstream(big) << std::string(64 * 1024 + 1, 'a');
  expect_refused("x=@" + big, "at most");
  std::vector<MetaValue> twice = {text("a", "1"), text("a", "2")};
  EXPECT_THROW(conv::check_meta(twice), conv::Error);
  std::vector<MetaValue> many;
  for (int i = 0; i < 65; ++i) many.push_back(text("k" + std::to_string(i), ""));
  EXPECT_THROW(conv::check_meta(many), conv::Error);
}

TEST(Metadata, RoundTripsThroughTheFile) {
  const Loaded m(model_with({text("labels", "yes\nno\n"), numbers("sample_rate", {16000}, {}),
                             numbers("mean", {1, 2, 3, 4, 5, 6}, {2, 3}), text("unicode", "\xc3\xa9t\xc3\xa9")}));
  ASSERT_EQ(m.status, FERRY_OK) << m.error;
  ASSERT_EQ(ferry_model_metadata_count(m.model), 4u);
  ferry_metadata e{};
  e.struct_size = sizeof e;
  ASSERT_EQ(ferry_model_metadata(m.model, "labels", &e), FERRY_OK);
  EXPECT_EQ(e.type, FERRY_METADATA_TEXT);
  EXPECT_EQ(std::string(e.text, e.text_bytes), "yes\nno\n");
  EXPECT_STREQ(e.text, "yes\nno\n");
  ASSERT_EQ(ferry_model_metadata(m.model, "mean", &e), FERRY_OK);
  EXPECT_EQ(e.type, FERRY_METADATA_NUMBERS);
  EXPECT_EQ(e.text, nullptr);
  EXPECT_EQ(e.count, 6u);
  ASSERT_EQ(e.rank, 2u);
  EXPECT_EQ(e.shape[0], 2u);
  EXPECT_EQ(e.shape[1], 3u);
  std::vector<double> v(6);
  ASSERT_EQ(ferry_model_metadata_numbers(m.model, "mean", v.data(), v.size()), FERRY_OK);
  EXPECT_EQ(v, (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ferry_model_metadata_numbers(m.model, "mean", v.data(), 5), FERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ferry_model_metadata_numbers(m.model, "labels", v.data(), 6), FERRY_INVALID_ARGUMENT);
  double rate = 0;
  ASSERT_EQ(ferry_model_metadata_numbers(m.model, "sample_rate", &rate, 1), FERRY_OK);
  EXPECT_EQ(rate, 16000);
  ASSERT_EQ(ferry_model_metadata(m.model, "sample_rate", &e), FERRY_OK);
  EXPECT_EQ(e.rank, 0u);
  EXPECT_EQ(e.count, 1u);
  // In stored order.
  const char* keys[] = {"labels", "sample_rate", "mean", "unicode"};
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_EQ(ferry_model_metadata_at(m.model, i, &e), FERRY_OK);
    EXPECT_STREQ(e.key, keys[i]);
  }
  EXPECT_EQ(ferry_model_metadata_at(m.model, 4, &e), FERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ferry_model_metadata(m.model, "missing", &e), FERRY_INVALID_ARGUMENT);
  EXPECT_NE(std::string(ferry_last_error()).find("labels, sample_rate, mean, unicode"), std::string::npos)
      << ferry_last_error();
  e.struct_size = 8;
  EXPECT_EQ(ferry_model_metadata(m.model, "labels", &e), FERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ferry_model_metadata_count(nullptr), 0u);
}

TEST(Metadata, AModelWithoutAnyHasNone) {
  const Loaded m(model_with({}));
  ASSERT_EQ(m.status, FERRY_OK) << m.error;
  EXPECT_EQ(ferry_model_metadata_count(m.model), 0u);
  ferry_metadata e{};
  e.struct_size = sizeof e;
  EXPECT_EQ(ferry_model_metadata(m.model, "labels", &e), FERRY_INVALID_ARGUMENT);
  EXPECT_NE(std::string(ferry_last_error()).find("no metadata"), std::string::npos) << ferry_last_error();
}

// The writer's runtime pass loads what it writes, so a broken entry is made
// by writing a sound one and changing its bytes in place (the committed
// catalogue, tests/bad/models/metadata_*.fb, holds the ones that cannot be:
// 65 entries, rank 5, an unknown type).
fb::MetaEntry* entry(std::vector<uint8_t>& bytes, uint32_t i) {
  return fb::GetMutableModel(bytes.data())->mutable_metadata()->GetMutableObject(i);
}

void expect_invalid(const std::vector<uint8_t>& bytes, const std::string& words,
                    ferry_status status = FERRY_INVALID_MODEL) {
  const Loaded m(bytes);
  EXPECT_EQ(m.status, status) << m.error;
  EXPECT_NE(m.error.find(words), std::string::npos) << m.error;
}

TEST(Metadata, TheLoaderRefusesBrokenEntries) {
  std::vector<uint8_t> b = model_with({text("a", "1"), text("b", "2")});
  entry(b, 1)->mutable_key()->Mutate(0, 'a');
  expect_invalid(b, "metadata[1] ('a'): the key is also metadata[0]'s");
  b = model_with({text("k", "1")});
  entry(b, 0)->mutable_key()->Mutate(0, ' ');
  expect_invalid(b, "metadata[0]: the key is absent or not 1 to 64 characters");
  b = model_with({text("t", "ok!")});
  entry(b, 0)->mutable_text()->Mutate(1, static_cast<char>(0xC0));  // "o\xC0!": a lead byte without its tail
  expect_invalid(b, "metadata[0] ('t'): the text is not UTF-8 (byte 1)");
  b = model_with({text("t", "abc")});
  entry(b, 0)->mutable_text()->Mutate(0, static_cast<char>(0xED));  // \xED b c: not a continuation
  expect_invalid(b, "not UTF-8 (byte 0)");
  b = model_with({numbers("n", {1, 2, 3}, {3})});
  entry(b, 0)->mutable_shape()->Mutate(0, 2);
  expect_invalid(b, "metadata[0] ('n'): the shape holds 2 numbers, the entry 3");
  b = model_with({numbers("n", {1}, {1})});
  entry(b, 0)->mutable_shape()->Mutate(0, 0x80000000u);
  expect_invalid(b, "the shape holds 2147483648 numbers, the entry 1");
  // A type this runtime does not know: FERRY_UNSUPPORTED, as the rule says.
  b = model_with({numbers("n", {1}, {})});
  entry(b, 0)->mutate_type(static_cast<fb::MetaType>(7));
  expect_invalid(b, "metadata[0] ('n'): unknown type 7", FERRY_UNSUPPORTED);
  // A text entry that holds numbers too.
  b = model_with({numbers("n", {1}, {})});
  entry(b, 0)->mutate_type(fb::MetaType::Text);
  expect_invalid(b, "a text entry holds text and nothing else");
}

}  // namespace
}  // namespace ferry::test

#endif  // FERRY_HAVE_CONVERTER
