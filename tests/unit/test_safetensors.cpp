// safetensors (converter/src/safetensors.cpp): the strict header reader and
// the layout checks, on files built byte by byte.
#ifdef FERRY_HAVE_CONVERTER

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "checkpoint/checkpoint.h"
#include "error.h"
#include "io/mapped_file.h"
#include "checkpoint_loading.h"
#include "pt_builder.h"

namespace ferry::conv {
namespace {

using test::Bytes;

using test::contains;
using test::load;
using test::load_error;
using test::Loaded;

std::string ignored_reason(const Checkpoint& ck, const std::string& name) {
  for (const auto& [n, why] : ck.ignored)
    if (n == name) return why;
  return "";
}

Bytes f32(std::vector<float> v) { return test::raw_bytes(v); }

// A header for a file with w [2, 2] F32 at [0, 16) and b [2] F32 at [16, 24).
const char* kTwo =
    R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})";

Bytes two_data() { return f32({1, 2, 3, 4, 5, 6}); }

TEST(Safetensors, ReadsTensorsAndMetadata) {
  Loaded l = load(test::safetensors_file(kTwo, two_data()));
  EXPECT_EQ(l.ck.form, "safetensors");
  ASSERT_EQ(l.ck.tensors.size(), 2u);
  EXPECT_EQ(l.ck.tensors[0].name, "w");  // header order
  EXPECT_EQ(l.ck.tensors[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(l.ck.tensors[0].stride, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(to_float32(l.ck.tensors[0]), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(to_float32(l.ck.tensors[1]), (std::vector<float>{5, 6}));
  EXPECT_EQ(l.ck.tensors[1].storage->key, "[16, 24)");
  EXPECT_EQ(l.ck.attributes.at("__metadata__.format"), "pt");
  // Unpadded headers and whitespace wherever JSON allows it after the
  // opening '{' (which the format requires at byte 8) are fine.
  const std::string spaced = "{\n\t\"w\" : { \"dtype\" : \"F32\" , \"shape\" : [ 2 , 2 ] , \"data_offsets\" : [ 0 , 16 ] } } ";
  Loaded s = load(test::safetensors_file(spaced, f32({1, 2, 3, 4}), false));
  EXPECT_EQ(s.ck.tensors.size(), 1u);
}

TEST(Safetensors, DTypes) {
  const std::string header =
      R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
      R"("bf":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]},)"
      R"("d":{"dtype":"F64","shape":[],"data_offsets":[6,14]},)"
      R"("step":{"dtype":"I64","shape":[1],"data_offsets":[14,22]},)"
      R"("q":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[22,24]},)"
      R"("f4":{"dtype":"F4","shape":[4],"data_offsets":[24,26]},)"
      R"("e":{"dtype":"F32","shape":[0,3],"data_offsets":[26,26]}})";
  Bytes data = test::raw_bytes(std::vector<uint16_t>{0x3C00, 0xC100});
  test::append(data, test::raw_bytes(std::vector<uint16_t>{0x4049}));
  test::append(data, test::raw_bytes(std::vector<double>{-0.5}));
  test::append(data, test::raw_bytes(std::vector<int64_t>{7}));
  test::append(data, Bytes{1, 2, 3, 4});
  Loaded l = load(test::safetensors_file(header, data));
  ASSERT_EQ(l.ck.tensors.size(), 4u);
  EXPECT_EQ(to_float32(l.ck.tensors[0]), (std::vector<float>{1, -2.5f}));
  EXPECT_EQ(to_float32(l.ck.tensors[1]), (std::vector<float>{3.140625f}));
  EXPECT_EQ(l.ck.tensors[2].numel(), 1);  // shape [] is a scalar
  EXPECT_EQ(to_float32(l.ck.tensors[2]), (std::vector<float>{-0.5f}));
  EXPECT_EQ(l.ck.tensors[3].numel(), 0);
  EXPECT_EQ(ignored_reason(l.ck, "step"), "not a floating-point tensor (int64)");
  EXPECT_EQ(ignored_reason(l.ck, "q"), "unsupported dtype F8_E4M3");
  EXPECT_EQ(ignored_reason(l.ck, "f4"), "unsupported dtype F4");
}

TEST(Safetensors, BadDType) {
  const std::string msg = load_error(test::safetensors_file(R"({"w":{"dtype":"F31","shape":[1],"data_offsets":[0,4]}})", f32({1})));
  EXPECT_TRUE(contains(msg, "safetensors header: tensor 'w': unknown dtype 'F31' at byte ")) << msg;
  // Sub-byte dtypes must fill whole bytes.
  const std::string odd = load_error(test::safetensors_file(R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", Bytes{0, 0}));
  EXPECT_TRUE(contains(odd, "3 elements of F4 do not fill whole bytes")) << odd;
}

TEST(Safetensors, OverlappingAndGappedOffsets) {
  const std::string overlap = load_error(test::safetensors_file(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      f32({1, 2, 3})));
  EXPECT_TRUE(contains(overlap, "safetensors tensors 'a' [0, 8) and 'b' [4, 12) overlap")) << overlap;

  const std::string gap = load_error(test::safetensors_file(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
      f32({1, 2, 3})));
  EXPECT_TRUE(contains(gap, "safetensors data has a gap of 4 bytes before tensor 'b' [8, 12) (after 'a')")) << gap;

  const std::string first = load_error(test::safetensors_file(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f32({1, 2})));
  EXPECT_TRUE(contains(first, "gap of 4 bytes before tensor 'a' [4, 8) (the first tensor)")) << first;

  // Offsets out of header order are fine as long as they tile the data.
  Loaded l = load(test::safetensors_file(
      R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
      f32({1, 2})));
  EXPECT_EQ(to_float32(l.ck.tensors[0]), (std::vector<float>{2}));

  const std::string tail = load_error(test::safetensors_file(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32({1, 2})));
  EXPECT_TRUE(contains(tail, "data section is 8 bytes, but its tensors cover 4")) << tail;

  const std::string past = load_error(test::safetensors_file(
      R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", f32({1, 2})));
  EXPECT_TRUE(contains(past, "tensor 'a': data_offsets [0, 12) reach past the end of the data section (8 bytes")) << past;

  const std::string size = load_error(test::safetensors_file(
      R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", f32({1, 2, 3})));
  EXPECT_TRUE(contains(size, "data_offsets [0, 12) hold 12 bytes, but dtype F32 and shape [2, 2] need 16")) << size;

  const std::string backwards = load_error(test::safetensors_file(
      R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", f32({1})));
  EXPECT_TRUE(contains(backwards, "end before they begin")) << backwards;
}

TEST(Safetensors, OversizedHeader) {
  Bytes huge;
  test::put64(huge, 100000001);
  test::append(huge, "{}");
  std::string msg = load_error(huge);
  EXPECT_TRUE(contains(msg, "safetensors header of 100000001 bytes exceeds the limit of 100000000")) << msg;

  Bytes past;
  test::put64(past, 64);
  test::append(past, "{}");
  msg = load_error(past);
  EXPECT_TRUE(contains(msg, "safetensors header of 64 bytes runs past the end of the file (10 bytes)")) << msg;

  Bytes max;
  test::put64(max, UINT64_MAX);
  test::append(max, "{}");
  EXPECT_TRUE(contains(load_error(max), "exceeds the limit"));
}

TEST(Safetensors, DuplicateKeys) {
  std::string msg = load_error(test::safetensors_file(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      f32({1, 2})));
  EXPECT_TRUE(contains(msg, "duplicate key 'a' at byte ")) << msg;
  // Equal after unescaping is equal.
  msg = load_error(test::safetensors_file(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"\u0061":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      f32({1, 2})));
  EXPECT_TRUE(contains(msg, "duplicate key 'a'")) << msg;
  msg = load_error(test::safetensors_file(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", f32({1})));
  EXPECT_TRUE(contains(msg, "tensor 'a': duplicate field 'dtype'")) << msg;
  msg = load_error(test::safetensors_file(R"({"__metadata__":{"k":"1","k":"2"}})", {}));
  EXPECT_TRUE(contains(msg, "duplicate __metadata__ key 'k'")) << msg;
  msg = load_error(test::safetensors_file(R"({"__metadata__":{},"__metadata__":{}})", {}));
  EXPECT_TRUE(contains(msg, "duplicate key '__metadata__'")) << msg;
}

TEST(Safetensors, StrictJson) {
  struct Bad {
    const char* header;
    const char* expect;
  };
  const Bad cases[] = {
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},})", "expected a string"},  // trailing comma
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} x)", "unexpected characters after the header object"},
      {R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "a shape dimension is not a non-negative integer"},
      {R"({"a":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}})", "has a leading zero"},
      {R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", "is not an integer"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551616]}})", "overflows 64 bits"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "',' in data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", "']' closing data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[1]}})", "tensor 'a' lacks 'data_offsets'"},
      {R"({"a":{"shape":[1],"data_offsets":[0,4]}})", "tensor 'a' lacks 'dtype'"},
      {R"({"a":5})", "'{' to open tensor 'a'"},
      {R"({"a\ud800":{}})", "lone high surrogate"},
      {R"({"a\udc00":{}})", "lone low surrogate"},
      {R"({"a\u0000":{}})", "\\u0000 in a string"},
      {R"({"a\x":{}})", "invalid escape '\\x'"},
      {"{\"a\tb\":{}}", "control character in a string"},
      {"{\"a\xff\":{}}", "not valid UTF-8"},
      {R"({"":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", "empty tensor name"},
      {R"({"__metadata__":{"k":1}})", "__metadata__ value of 'k' is not a string"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":[[[[1,2],{"y":nul}]]]}})", "invalid JSON value"},
      {R"({"a")", "expected ':'"},
      {R"({"a":{"dtype":"F32)", "unterminated string"},
  };
  for (const Bad& b : cases) {
    const std::string msg = load_error(test::safetensors_file(b.header, f32({1})));
    EXPECT_TRUE(contains(msg, b.expect)) << b.header << "\n  -> " << msg;
    EXPECT_TRUE(contains(msg, "safetensors")) << msg;
  }
  // Values nested past the skip limit are refused, not recursed into.
  std::string deep = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":)";
  deep += std::string(100, '[') + std::string(100, ']') + "}}";
  EXPECT_TRUE(contains(load_error(test::safetensors_file(deep, f32({1}))), "nested deeper than 64"));
}

TEST(Safetensors, UnknownFieldsEscapesAndUnicodeNames) {
  const std::string header =
      R"({"__metadata__":{"note":"tab\there \"q\" \u00e9 \ud83d\ude00"},)"
      R"("enc.w\u00e9ight":{"dtype":"F32","shape":[1],"data_offsets":[0,4],)"
      R"("future":{"a":[1,-2.5e+3,true,false,null,"s",{}],"b":[]}}})";
  Loaded l = load(test::safetensors_file(header, f32({7})));
  ASSERT_EQ(l.ck.tensors.size(), 1u);
  EXPECT_EQ(l.ck.tensors[0].name, "enc.w\xc3\xa9ight");
  EXPECT_EQ(l.ck.attributes.at("__metadata__.note"), "tab\there \"q\" \xc3\xa9 \xf0\x9f\x98\x80");
}

TEST(Safetensors, ShapesAreBounded) {
  std::string msg = load_error(test::safetensors_file(
      R"({"a":{"dtype":"F32","shape":[1099511627776,2],"data_offsets":[0,4]}})", f32({1})));
  EXPECT_TRUE(contains(msg, "too many elements (shape [1099511627776, 2])")) << msg;
  msg = load_error(test::safetensors_file(R"({"a":{"dtype":"F32","shape":[2199023255553],"data_offsets":[0,4]}})", f32({1})));
  EXPECT_TRUE(contains(msg, "is too large")) << msg;
  std::string rank = R"({"a":{"dtype":"F32","shape":[)";
  for (int i = 0; i < 65; ++i) rank += i ? ",1" : "1";
  rank += R"(],"data_offsets":[0,4]}})";
  EXPECT_TRUE(contains(load_error(test::safetensors_file(rank, f32({1}))), "more than 64 dimensions"));
}

TEST(Safetensors, KeyOptionIsRefused) {
  LoadOptions o;
  o.key = "model";
  EXPECT_TRUE(contains(load_error(test::safetensors_file(kTwo, two_data()), o), "--key does not apply to a safetensors file"));
}

TEST(Safetensors, CorruptionNeverCrashes) {
  const Bytes good = test::safetensors_file(kTwo, two_data());
  test::load_every_corruption(good, 1, {0x01, 0x20, 0x80});
  for (size_t n = 0; n < good.size(); ++n) {
    const Bytes prefix(good.begin(), good.begin() + long(n));
    EXPECT_FALSE(load_error(prefix).empty()) << n;
  }
}

}  // namespace
}  // namespace ferry::conv

#endif  // FERRY_HAVE_CONVERTER
