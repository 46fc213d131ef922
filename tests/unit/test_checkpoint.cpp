// Checkpoint reading (converter/src/checkpoint.h) on zip checkpoints (state
// dicts, training checkpoints, whole pickled modules) built
// byte by byte, as a GPU machine's torch.save writes them ('cuda:0').
// The converter is optional (FERRY_CONVERTER); these tests need it.
#ifdef FERRY_HAVE_CONVERTER

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <functional>
#include <limits>
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
using test::PickleBuilder;
using test::TensorSpec;

using test::contains;
using test::load;
using test::load_error;
using test::Loaded;

TensorSpec spec(std::string name, std::string key, int64_t numel, std::vector<int64_t> size,
                std::string cls = "FloatStorage") {
  TensorSpec t;
  t.name = std::move(name);
  t.key = std::move(key);
  t.storage_numel = numel;
  t.size = std::move(size);
  t.storage_class = std::move(cls);
  return t;
}

std::string ignored_reason(const Checkpoint& ck, const std::string& name) {
  for (const auto& [n, why] : ck.ignored)
    if (n == name) return why;
  return "";
}

Bytes f32(std::vector<float> v) { return test::raw_bytes(v); }

TEST(Checkpoint, CudaStateDict) {
  const Bytes pkl = test::state_dict_pickle({spec("fc.weight", "0", 6, {2, 3}), spec("fc.bias", "1", 2, {2})});
  const Bytes zip = test::checkpoint_zip(pkl, {{"0", f32({0, 1, 2, 3, 4, 5})}, {"1", f32({1.5f, -2})}}, "sd");
  Loaded l = load(zip);
  EXPECT_EQ(l.ck.form, "zip state_dict");
  ASSERT_EQ(l.ck.tensors.size(), 2u);
  EXPECT_EQ(l.ck.tensors[0].name, "fc.weight");  // state-dict order
  EXPECT_EQ(l.ck.tensors[1].name, "fc.bias");
  const TensorRef& w = l.ck.tensors[0];
  EXPECT_EQ(w.dtype, DType::F32);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w.stride, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(w.numel(), 6);
  ASSERT_NE(w.storage, nullptr);
  EXPECT_EQ(w.storage->location, "cuda:0");  // recorded, never needed
  EXPECT_EQ(w.storage->key, "0");
  EXPECT_EQ(w.storage->nbytes, 24u);
  EXPECT_FALSE(w.storage->big_endian);
  // The storage views the mapped file.
  EXPECT_GE(w.storage->data, l.map->data());
  EXPECT_LT(w.storage->data, l.map->data() + l.map->size());
  EXPECT_EQ(to_float32(w), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(to_float32(l.ck.tensors[1]), (std::vector<float>{1.5f, -2}));
  EXPECT_TRUE(l.ck.ignored.empty());
  EXPECT_TRUE(l.ck.attributes.empty());
}

TEST(Checkpoint, TransposedView) {
  TensorSpec t = spec("t", "0", 6, {3, 2});
  t.stride = {1, 3};  // w.t() of a [2, 3] tensor
  const Bytes zip = test::checkpoint_zip(test::state_dict_pickle({t}), {{"0", f32({0, 1, 2, 3, 4, 5})}});
  Loaded l = load(zip);
  ASSERT_EQ(l.ck.tensors.size(), 1u);
  EXPECT_EQ(to_float32(l.ck.tensors[0]), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(Checkpoint, SliceWithOffsetAndSharedStorage) {
  TensorSpec a = spec("a", "0", 10, {3});
  a.offset = 2;  // base[2:5]
  TensorSpec b = spec("b", "0", 10, {2, 2});
  b.offset = 1;
  b.stride = {4, 2};  // base[1::4][:2] x base[::2]
  TensorSpec scalar = spec("s", "0", 10, {});
  scalar.offset = 9;
  const Bytes zip = test::checkpoint_zip(test::state_dict_pickle({a, b, scalar}),
                                         {{"0", f32({0, 1, 2, 3, 4, 5, 6, 7, 8, 9})}});
  Loaded l = load(zip);
  ASSERT_EQ(l.ck.tensors.size(), 3u);
  EXPECT_EQ(to_float32(l.ck.tensors[0]), (std::vector<float>{2, 3, 4}));
  EXPECT_EQ(to_float32(l.ck.tensors[1]), (std::vector<float>{1, 3, 5, 7}));
  EXPECT_EQ(to_float32(l.ck.tensors[2]), (std::vector<float>{9}));
  EXPECT_EQ(l.ck.tensors[2].numel(), 1);
  EXPECT_EQ(l.ck.tensors[0].storage, l.ck.tensors[1].storage);  // cached by key
}

TEST(Checkpoint, HalfBFloatAndDoubleConvert) {
  const std::vector<uint16_t> half = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x03FF, 0x7C00, 0x8000};
  const std::vector<uint16_t> bf = {0x3F80, 0xC000, 0x4049};
  const std::vector<double> dbl = {1e-3, -7.25};
  const Bytes pkl = test::state_dict_pickle({spec("h", "0", 7, {7}, "HalfStorage"),
                                             spec("b", "1", 3, {3}, "BFloat16Storage"),
                                             spec("d", "2", 2, {2}, "DoubleStorage")});
  const Bytes zip = test::checkpoint_zip(
      pkl, {{"0", test::raw_bytes(half)}, {"1", test::raw_bytes(bf)}, {"2", test::raw_bytes(dbl)}});
  Loaded l = load(zip);
  ASSERT_EQ(l.ck.tensors.size(), 3u);
  EXPECT_EQ(l.ck.tensors[0].dtype, DType::F16);
  EXPECT_EQ(l.ck.tensors[1].dtype, DType::BF16);
  EXPECT_EQ(l.ck.tensors[2].dtype, DType::F64);
  const std::vector<float> h = to_float32(l.ck.tensors[0]);
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.5f);
  EXPECT_EQ(h[2], 65504.0f);
  EXPECT_EQ(h[3], std::ldexp(1.0f, -24));   // smallest subnormal
  EXPECT_EQ(h[4], std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_TRUE(std::isinf(h[5]));
  EXPECT_TRUE(std::signbit(h[6]));
  EXPECT_EQ(to_float32(l.ck.tensors[1]), (std::vector<float>{1.0f, -2.0f, 3.140625f}));
  EXPECT_EQ(to_float32(l.ck.tensors[2]), (std::vector<float>{1e-3f, -7.25f}));
}

TEST(Checkpoint, HalfToFloatIsExactForAllValues) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = uint16_t(i);
  const Bytes zip = test::checkpoint_zip(test::state_dict_pickle({spec("h", "0", 65536, {65536}, "HalfStorage")}),
                                         {{"0", test::raw_bytes(all)}});
  Loaded l = load(zip);
  const std::vector<float> f = to_float32(l.ck.tensors[0]);
  for (uint32_t i = 0; i < 65536; ++i) {
    const int exp = int((i >> 10) & 0x1F), mant = int(i & 0x3FF);
    const float sign = (i & 0x8000) ? -1.0f : 1.0f;
    if (exp == 31) {
      EXPECT_TRUE(mant ? std::isnan(f[i]) : std::isinf(f[i])) << i;
      continue;
    }
    const float expect = exp == 0 ? sign * std::ldexp(float(mant), -24)
                                  : sign * std::ldexp(float(1024 + mant), exp - 25);
    ASSERT_EQ(f[i], expect) << i;
  }
}

TEST(Checkpoint, BigEndianByteOrder) {
  const Bytes pkl = test::state_dict_pickle({spec("w", "0", 3, {3}), spec("h", "1", 2, {2}, "HalfStorage")});
  const Bytes zip = test::checkpoint_zip(pkl,
                                         {{"0", test::raw_bytes(std::vector<float>{1.5f, -3, 1e20f}, true)},
                                          {"1", test::raw_bytes(std::vector<uint16_t>{0x3C00, 0xC100}, true)}},
                                         "archive", "big");
  Loaded l = load(zip);
  ASSERT_EQ(l.ck.tensors.size(), 2u);
  EXPECT_TRUE(l.ck.tensors[0].storage->big_endian);
  EXPECT_EQ(to_float32(l.ck.tensors[0]), (std::vector<float>{1.5f, -3, 1e20f}));
  EXPECT_EQ(to_float32(l.ck.tensors[1]), (std::vector<float>{1.0f, -2.5f}));

  const Bytes little = test::checkpoint_zip(pkl, {{"0", f32({1, 2, 3})}, {"1", test::raw_bytes(std::vector<uint16_t>{0, 0})}},
                                            "archive", "little");
  EXPECT_FALSE(load(little).ck.tensors[0].storage->big_endian);
  const Bytes odd = test::checkpoint_zip(pkl, {{"0", f32({1, 2, 3})}, {"1", f32({1})}}, "archive", "middle");
  EXPECT_TRUE(contains(load_error(odd), "byte order 'middle'"));
}

TEST(Checkpoint, ViewPastStorageEndIsRefused) {
  const Bytes zip = test::checkpoint_zip(test::state_dict_pickle({spec("fc.weight", "0", 3, {4})}),
                                         {{"0", f32({1, 2, 3})}});
  const std::string msg = load_error(zip);
  EXPECT_TRUE(contains(msg, "tensor 'fc.weight'")) << msg;
  EXPECT_TRUE(contains(msg, "past the end")) << msg;

  TensorSpec off = spec("b", "0", 3, {2});
  off.offset = 2;
  EXPECT_TRUE(contains(load_error(test::checkpoint_zip(test::state_dict_pickle({off}), {{"0", f32({1, 2, 3})}})),
                       "past the end"));
  TensorSpec strided = spec("c", "0", 3, {2, 2});
  strided.stride = {2, 1};
  EXPECT_TRUE(contains(load_error(test::checkpoint_zip(test::state_dict_pickle({strided}), {{"0", f32({1, 2, 3})}})),
                       "past the end"));
}

TEST(Checkpoint, OverflowingViewsAreRefused) {
  TensorSpec huge = spec("h", "0", 3, {2});
  huge.stride = {std::numeric_limits<int64_t>::max()};
  EXPECT_TRUE(contains(load_error(test::checkpoint_zip(test::state_dict_pickle({huge}), {{"0", f32({1, 2, 3})}})),
                       "past the end"));
  TensorSpec many = spec("m", "0", 3, {int64_t{1} << 31, int64_t{1} << 31, 4});
  many.stride = {0, 0, 0};
  EXPECT_TRUE(contains(load_error(test::checkpoint_zip(test::state_dict_pickle({many}), {{"0", f32({1, 2, 3})}})),
                       "too many elements"));
  // A size-1 dimension may carry any stride; it is never stepped over.
  TensorSpec one = spec("o", "0", 3, {1, 3});
  one.stride = {std::numeric_limits<int64_t>::max(), 1};
  Loaded l = load(test::checkpoint_zip(test::state_dict_pickle({one}), {{"0", f32({1, 2, 3})}}));
  EXPECT_EQ(to_float32(l.ck.tensors[0]), (std::vector<float>{1, 2, 3}));
}

TEST(Checkpoint, EmptyTensorsSkipBoundsChecks) {
  TensorSpec e = spec("e", "0", 0, {0, 5});
  e.offset = 0;
  Loaded l = load(test::checkpoint_zip(test::state_dict_pickle({e}), {{"0", Bytes{}}}));
  ASSERT_EQ(l.ck.tensors.size(), 1u);
  EXPECT_EQ(l.ck.tensors[0].numel(), 0);
  EXPECT_TRUE(to_float32(l.ck.tensors[0]).empty());
}

TEST(Checkpoint, RecordSizeMustMatchDeclaredStorage) {
  const Bytes pkl = test::state_dict_pickle({spec("w", "0", 4, {4})});
  const std::string shorter = load_error(test::checkpoint_zip(pkl, {{"0", f32({1, 2, 3})}}));
  EXPECT_TRUE(contains(shorter, "'archive/data/0' has 12 bytes")) << shorter;
  EXPECT_TRUE(contains(shorter, "16 bytes")) << shorter;
  EXPECT_TRUE(contains(load_error(test::checkpoint_zip(pkl, {{"0", f32({1, 2, 3, 4, 5})}})), "20 bytes"));
  const std::string missing = load_error(test::checkpoint_zip(pkl, {{"1", f32({1, 2, 3, 4})}}));
  EXPECT_TRUE(contains(missing, "'archive/data/0' not found")) << missing;
  // numel * element size overflowing uint64
  const Bytes overflow = test::state_dict_pickle({spec("w", "0", int64_t{1} << 62, {1}, "DoubleStorage")});
  EXPECT_TRUE(contains(load_error(test::checkpoint_zip(overflow, {{"0", f32({1, 2})}})), "overflow"));
}

TEST(Checkpoint, StorageKeysAreValidated) {
  for (const char* key : {"../0", "a/b", "..", ""}) {
    const Bytes pkl = test::state_dict_pickle({spec("w", key, 1, {1})});
    const std::string msg = load_error(test::checkpoint_zip(pkl, {{"0", f32({1})}}));
    EXPECT_TRUE(contains(msg, "invalid storage key")) << key << ": " << msg;
  }
}

TEST(Checkpoint, StorageDeclaredTwiceDifferently) {
  const Bytes pkl = test::state_dict_pickle({spec("a", "0", 4, {4}), spec("b", "0", 2, {2})});
  EXPECT_TRUE(contains(load_error(test::checkpoint_zip(pkl, {{"0", f32({1, 2, 3, 4})}})), "declared twice"));
}

TEST(Checkpoint, NonFloatTensorsAreIgnored) {
  const Bytes pkl = test::state_dict_pickle({spec("bn.weight", "0", 2, {2}), spec("bn.num_batches_tracked", "1", 1, {}, "LongStorage"),
                                             spec("c", "2", 1, {1}, "ComplexFloatStorage")});
  const Bytes zip = test::checkpoint_zip(pkl, {{"0", f32({1, 2})}, {"1", test::raw_bytes(std::vector<int64_t>{7})},
                                               {"2", test::raw_bytes(std::vector<float>{1, 2})}});
  Loaded l = load(zip);
  ASSERT_EQ(l.ck.tensors.size(), 1u);
  EXPECT_EQ(l.ck.tensors[0].name, "bn.weight");
  EXPECT_EQ(ignored_reason(l.ck, "bn.num_batches_tracked"), "not a floating-point tensor (int64)");
  EXPECT_EQ(ignored_reason(l.ck, "c"), "unsupported dtype complex64");
}

TEST(Checkpoint, ParametersAndV3UntypedStorage) {
  TensorSpec p = spec("p", "0", 2, {2});
  p.parameter = true;
  TensorSpec h = spec("h", "1", 6, {3}, "UntypedStorage");  // 6 bytes = 3 halves
  h.v3_dtype = "float16";
  const Bytes zip = test::checkpoint_zip(test::state_dict_pickle({p, h}),
                                         {{"0", f32({4, 5})}, {"1", test::raw_bytes(std::vector<uint16_t>{0x3C00, 0x4000, 0x4200})}});
  Loaded l = load(zip);
  ASSERT_EQ(l.ck.tensors.size(), 2u);
  EXPECT_EQ(to_float32(l.ck.tensors[0]), (std::vector<float>{4, 5}));
  EXPECT_EQ(l.ck.tensors[1].dtype, DType::F16);
  EXPECT_EQ(to_float32(l.ck.tensors[1]), (std::vector<float>{1, 2, 3}));
  // Offsets count elements of the tensor's dtype, not bytes.
  TensorSpec past = h;
  past.offset = 1;
  EXPECT_TRUE(contains(load_error(test::checkpoint_zip(test::state_dict_pickle({past}),
                                                       {{"1", test::raw_bytes(std::vector<uint16_t>{1, 2, 3})}})),
                       "past the end"));
}

// {'epoch': 3, 'model_state_dict': sd, 'optimizer_state_dict': {...}, 'loss': 0.25}
Bytes training_pickle(const std::string& sd_key, const std::vector<TensorSpec>& sd,
                      const std::vector<std::pair<std::string, std::vector<TensorSpec>>>& extra_dicts = {}) {
  PickleBuilder p;
  p.proto(2).empty_dict().put().mark();
  p.str("epoch").integer(3);
  p.str(sd_key);
  test::emit_state_dict(p, sd);
  p.str("optimizer_state_dict").empty_dict().mark();
  p.str("state").empty_dict().str("param_groups").empty_list().empty_dict().str("lr").binfloat(0.1).setitem().append_();
  p.setitems();
  for (const auto& [name, tensors] : extra_dicts) {
    p.str(name);
    test::emit_state_dict(p, tensors);
  }
  p.str("loss").binfloat(0.25);
  p.setitems().stop();
  return p.bytes;
}

TEST(Checkpoint, TrainingCheckpointSelectsKnownKey) {
  const Bytes zip = test::checkpoint_zip(training_pickle("model_state_dict", {spec("fc.weight", "0", 2, {1, 2})}),
                                         {{"0", f32({1, 2})}});
  Loaded l = load(zip);
  EXPECT_EQ(l.ck.form, "zip training checkpoint (key 'model_state_dict')");
  ASSERT_EQ(l.ck.tensors.size(), 1u);
  EXPECT_EQ(l.ck.tensors[0].name, "fc.weight");
  EXPECT_EQ(ignored_reason(l.ck, "optimizer_state_dict"), "optimizer state");
  EXPECT_EQ(ignored_reason(l.ck, "epoch"), "not a tensor (int)");
  EXPECT_EQ(ignored_reason(l.ck, "loss"), "not a tensor (float)");
}

TEST(Checkpoint, LargestTensorDictWhenNoKnownKey) {
  const Bytes pkl = training_pickle("ema", {spec("a", "0", 1, {1})},
                                    {{"student", {spec("a", "1", 1, {1}), spec("b", "2", 1, {1})}}});
  const Bytes zip = test::checkpoint_zip(pkl, {{"0", f32({1})}, {"1", f32({2})}, {"2", f32({3})}});
  Loaded l = load(zip);
  EXPECT_EQ(l.ck.form, "zip training checkpoint (key 'student')");
  ASSERT_EQ(l.ck.tensors.size(), 2u);
  EXPECT_EQ(to_float32(l.ck.tensors[1]), (std::vector<float>{3}));
  // The other dict's tensors are listed under their path from the top.
  EXPECT_EQ(ignored_reason(l.ck, "ema.a"), "not selected (under key 'ema')");
  EXPECT_EQ(ignored_reason(l.ck, "ema"), "");

  // --key overrides the choice.
  LoadOptions o;
  o.key = "ema";
  Loaded k = load(zip, o);
  EXPECT_EQ(k.ck.form, "zip training checkpoint (key 'ema')");
  ASSERT_EQ(k.ck.tensors.size(), 1u);
  EXPECT_EQ(to_float32(k.ck.tensors[0]), (std::vector<float>{1}));

  o.key = "teacher";
  const std::string msg = load_error(zip, o);
  EXPECT_TRUE(contains(msg, "no key 'teacher'")) << msg;
  EXPECT_TRUE(contains(msg, "'epoch', 'ema', 'optimizer_state_dict', 'student', 'loss'")) << msg;
  o.key = "epoch";
  EXPECT_TRUE(contains(load_error(zip, o), "not a state dict"));
}

TEST(Checkpoint, NonTensorEntriesOfAStateDict) {
  // A bare state dict with an extra entry that is not a tensor.
  PickleBuilder p;
  p.proto().global("collections", "OrderedDict").empty_tuple().reduce().mark();
  p.str("w");
  test::emit_tensor(p, spec("w", "0", 1, {1}));
  p.str("_extra_state").integer(5);
  p.setitems().stop();
  Loaded l = load(test::checkpoint_zip(p.bytes, {{"0", f32({1})}}));
  EXPECT_EQ(l.ck.form, "zip state_dict");
  EXPECT_EQ(l.ck.tensors.size(), 1u);
  EXPECT_EQ(ignored_reason(l.ck, "_extra_state"), "not a tensor (int)");
}

TEST(Checkpoint, NoStateDictFound) {
  PickleBuilder p;
  p.proto().empty_dict().str("epoch").integer(1).setitem().stop();
  const std::string msg = load_error(test::checkpoint_zip(p.bytes, {}));
  EXPECT_TRUE(contains(msg, "no state dict found")) << msg;
  EXPECT_TRUE(contains(msg, "'epoch'")) << msg;

  PickleBuilder list;
  list.proto().empty_list().stop();
  EXPECT_TRUE(contains(load_error(test::checkpoint_zip(list.bytes, {})), "not a state dict"));
}

TEST(Checkpoint, MaliciousPickleIsRefused) {
  PickleBuilder p;
  p.proto().global("posix", "system").str("echo pwned").tuple_n(1).reduce().stop();
  const std::string msg = load_error(test::checkpoint_zip(p.bytes, {}));
  EXPECT_TRUE(contains(msg, "posix.system")) << msg;
  EXPECT_TRUE(contains(msg, "archive/data.pkl")) << msg;
}

TEST(Checkpoint, PersistentIdsMustBeStorages) {
  PickleBuilder p;
  p.proto().mark().str("module").none().tuple().binpersid().stop();
  EXPECT_TRUE(contains(load_error(test::checkpoint_zip(p.bytes, {})), "('storage'"));
  PickleBuilder q;
  q.proto().mark().str("storage").global("torch", "NotAStorage").str("0").str("cpu").integer(1).tuple().binpersid().stop();
  EXPECT_TRUE(contains(load_error(test::checkpoint_zip(q.bytes, {{"0", f32({1})}})), "unknown storage type 'torch.NotAStorage'"));
}

TEST(Checkpoint, CompressedRecordsAreRefused) {
  const Bytes pkl = test::state_dict_pickle({spec("w", "0", 1, {1})});
  test::ZipBuilder z;
  z.add("archive/data.pkl", pkl);
  const Bytes data = f32({1});
  z.add("archive/data/0", test::deflate_stored_blocks(data), true, 8, data.size());
  EXPECT_TRUE(contains(load_error(z.finish()), "compression method 8"));
}

TEST(Checkpoint, ZipWithoutDataPkl) {
  test::ZipBuilder z;
  z.add("archive/other", f32({1}));
  EXPECT_TRUE(contains(load_error(z.finish()), "data.pkl"));
}

TEST(Checkpoint, BadVersionRecord) {
  test::ZipBuilder z;
  z.add("archive/data.pkl", test::state_dict_pickle({}));
  z.add("archive/version", test::bytes_of("three"));
  EXPECT_TRUE(contains(load_error(z.finish()), "not a version number"));
}

TEST(Checkpoint, TorchScriptIsDetected) {
  test::ZipBuilder z;
  z.add("m/data.pkl", test::state_dict_pickle({}));
  z.add("m/code/__torch__/m.py", test::bytes_of("x"));
  z.add("m/constants.pkl", PickleBuilder().proto().empty_tuple().stop().bytes);
  EXPECT_TRUE(contains(load_error(z.finish()), "TorchScript"));
}

TEST(Checkpoint, OtherFormatsAreRecognized) {
  Bytes tar(1024, 0);
  std::memcpy(tar.data(), "sd.pt", 5);
  std::memcpy(tar.data() + 257, "ustar", 5);
  // The pre-0.3 tar format is read (legacy_tar.h): this one's header is not one.
  EXPECT_TRUE(contains(load_error(tar), "tar header at byte 0: bad header checksum (not a PyTorch 0.1-0.2 tar archive"))
      << load_error(tar);

  // A legacy stream that stops after its magic number: detected and read.
  Bytes legacy = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e};
  EXPECT_TRUE(contains(load_error(legacy), "legacy stream, protocol version pickle")) << load_error(legacy);

  Bytes safetensors;
  test::put64(safetensors, 2);
  test::append(safetensors, "{}");
  Loaded st = load(safetensors);
  EXPECT_EQ(st.ck.form, "safetensors");
  EXPECT_TRUE(st.ck.tensors.empty());

  EXPECT_TRUE(contains(load_error(test::bytes_of("PYTORCH1 and more")), "PYTORCH1"));
  EXPECT_TRUE(contains(load_error(PickleBuilder().proto().none().stop().bytes), "not a torch.save checkpoint"));

  const std::string junk = load_error(test::bytes_of("\x01\x02\x03garbage"));
  EXPECT_TRUE(contains(junk, "not a PyTorch checkpoint (unrecognized header 01 02 03 67")) << junk;
  EXPECT_TRUE(contains(load_error(Bytes{}), "empty file"));
}

TEST(Checkpoint, MappedFileErrorsNameThePath) {
  try {
    MappedFile m("/nonexistent/dir/model.pt");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "/nonexistent/dir/model.pt"));
  }
  test::TempFile empty(Bytes{});
  MappedFile m(empty.path());
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.path(), empty.path());
  EXPECT_THROW(MappedFile("/tmp"), Error);  // a directory
}

TEST(Checkpoint, ToFloat32RefusesIntegerTensors) {
  TensorRef t;
  t.name = "n";
  t.dtype = DType::I64;
  EXPECT_THROW(to_float32(t), Error);
  // A hand-made view past its storage is caught at materialization too.
  auto s = std::make_shared<Storage>();
  float data[2] = {1, 2};
  s->data = reinterpret_cast<const uint8_t*>(data);
  s->nbytes = sizeof data;
  s->numel = 2;
  s->dtype = DType::F32;
  TensorRef v;
  v.name = "v";
  v.dtype = DType::F32;
  v.shape = {3};
  v.stride = {1};
  v.storage = s;
  EXPECT_THROW(to_float32(v), Error);
  v.shape = {2};
  EXPECT_EQ(to_float32(v), (std::vector<float>{1, 2}));
}

TEST(Checkpoint, DTypeNamesAndSizes) {
  EXPECT_STREQ(dtype_name(DType::F32), "float32");
  EXPECT_STREQ(dtype_name(DType::BF16), "bfloat16");
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  EXPECT_EQ(dtype_size(DType::Unknown), 0u);
}

TEST(Checkpoint, ZipCorruptionNeverCrashes) {
  TensorSpec t = spec("w", "0", 6, {3, 2});
  t.stride = {1, 3};
  const Bytes zip = test::checkpoint_zip(test::state_dict_pickle({t, spec("b", "1", 2, {2}, "HalfStorage")}),
                                         {{"0", f32({0, 1, 2, 3, 4, 5})}, {"1", test::raw_bytes(std::vector<uint16_t>{1, 2})}});
  test::load_every_corruption(zip, 3, {0x5A});
}

// ---------------------------------------------------------------------------
// Training checkpoints: what is not the model is listed under its own path.

TEST(Checkpoint, IgnoredEntriesAreNamedByTheirPathFromTheTop) {
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  p.str("epoch").integer(3);
  p.str("model_state_dict");
  test::emit_state_dict(p, {spec("fc.weight", "0", 2, {1, 2})});
  p.str("optimizer_state_dict").empty_dict().mark().str("state").empty_dict().mark();
  p.integer(0).empty_dict().mark().str("step");
  test::emit_tensor(p, spec("", "1", 1, {}));
  p.str("exp_avg");
  test::emit_tensor(p, spec("", "2", 2, {1, 2}));
  p.setitems().setitems();
  p.str("param_groups").empty_list().empty_dict().str("lr").binfloat(0.1).setitem().append_();
  p.setitems();
  p.str("history").empty_list();
  test::emit_tensor(p, spec("", "3", 1, {1}));
  p.append_();
  p.setitems().stop();
  const Bytes zip = test::checkpoint_zip(
      p.bytes, {{"0", f32({1, 2})}, {"1", f32({1})}, {"2", f32({0, 0})}, {"3", f32({5})}});
  Loaded l = load(zip);
  ASSERT_EQ(l.ck.tensors.size(), 1u);
  EXPECT_EQ(ignored_reason(l.ck, "epoch"), "not a tensor (int)");
  EXPECT_EQ(ignored_reason(l.ck, "optimizer_state_dict.state.0.step"), "optimizer state");
  EXPECT_EQ(ignored_reason(l.ck, "optimizer_state_dict.state.0.exp_avg"), "optimizer state");
  EXPECT_EQ(ignored_reason(l.ck, "history.0"), "not selected (under key 'history')");
  EXPECT_EQ(ignored_reason(l.ck, "optimizer_state_dict"), "");  // listed by its tensors
  EXPECT_EQ(l.ck.ignored.size(), 4u);
}

// ---------------------------------------------------------------------------
// Whole pickled modules (torch.save(model)).

test::ModuleSpec lstm_module(bool batch_first) {
  test::ModuleSpec m;
  m.module = "torch.nn.modules.rnn";
  m.cls = "LSTM";
  m.parameters = {spec("weight_ih_l0", "1", 8, {8, 1}), spec("weight_hh_l0", "2", 16, {8, 2})};
  m.attributes = {{"mode", "LSTM"},           {"input_size", "1"},    {"hidden_size", "2"},
                  {"num_layers", "1"},        {"bias", "False"},      {"batch_first", batch_first ? "True" : "False"},
                  {"bidirectional", "False"}, {"proj_size", "0"}};
  return m;
}

test::ModuleSpec linear_module() {
  test::ModuleSpec m;
  m.parameters = {spec("weight", "3", 2, {1, 2}), spec("bias", "4", 1, {1})};
  m.attributes = {{"in_features", "2"}, {"out_features", "1"}};
  return m;
}

std::vector<std::pair<std::string, Bytes>> module_storages() {
  std::vector<float> w_ih(8), w_hh(16);
  for (int i = 0; i < 8; ++i) w_ih[size_t(i)] = float(i);
  for (int i = 0; i < 16; ++i) w_hh[size_t(i)] = float(-i);
  return {{"0", f32({7})}, {"1", f32(w_ih)}, {"2", f32(w_hh)}, {"3", f32({1, 2})},
          {"4", f32({3})}, {"5", f32({9, 9})}, {"6", f32({4, 4})}};
}

test::ModuleSpec net_module() {
  test::ModuleSpec net;
  net.module = "__main__";
  net.cls = "Net";
  net.parameters = {spec("scale", "0", 1, {1})};
  net.none_parameters = {"unused"};
  net.buffers = {spec("running", "5", 2, {2}), spec("scratch", "6", 2, {2})};
  net.non_persistent = {"scratch"};
  net.children = {{"lstm", lstm_module(true)}, {"fc", linear_module()}};
  net.attributes = {{"batch_first", "True"}, {"name", "demo"}};
  return net;
}

std::vector<std::string> names_of(const Checkpoint& ck) {
  std::vector<std::string> n;
  for (const TensorRef& t : ck.tensors) n.push_back(t.name);
  return n;
}

TEST(Checkpoint, WholeModuleInStateDictOrder) {
  Loaded l = load(test::checkpoint_zip(test::module_pickle(net_module()), module_storages()));
  EXPECT_EQ(l.ck.form, "zip whole module (__main__.Net)");
  // Own parameters, persistent buffers, then children depth first; None
  // parameters and non-persistent buffers are not state-dict entries.
  EXPECT_EQ(names_of(l.ck), (std::vector<std::string>{"scale", "running", "lstm.weight_ih_l0", "lstm.weight_hh_l0",
                                                      "fc.weight", "fc.bias"}));
  EXPECT_EQ(to_float32(l.ck.tensors[3])[5], -5.0f);
  EXPECT_EQ(l.ck.attributes.at("lstm.batch_first"), "true");
  EXPECT_EQ(l.ck.attributes.at("lstm.hidden_size"), "2");
  EXPECT_EQ(l.ck.attributes.at("lstm.bias"), "false");
  EXPECT_EQ(l.ck.attributes.at("lstm.mode"), "LSTM");
  EXPECT_EQ(l.ck.attributes.at("batch_first"), "true");  // the root's own
  EXPECT_EQ(l.ck.attributes.count("name"), 0u);          // not a hyper-parameter
  EXPECT_EQ(l.ck.attributes.count("fc.bias"), 0u);       // a parameter, not a flag
  EXPECT_TRUE(l.ck.ignored.empty());
}

TEST(Checkpoint, WholeModuleRnnModeDecidesTheNonlinearity) {
  test::ModuleSpec rnn;
  rnn.module = "torch.nn.modules.rnn";
  rnn.cls = "RNN";
  rnn.parameters = {spec("weight_ih_l0", "1", 8, {8, 1})};
  // forward() runs what `mode` says, whatever `nonlinearity` claims.
  rnn.attributes = {{"mode", "RNN_RELU"}, {"batch_first", "False"}, {"nonlinearity", "tanh"}};
  test::ModuleSpec net;
  net.module = "__main__";
  net.cls = "Net";
  net.children = {{"rnn", rnn}};
  // DataParallel(net): every name starts with "module."; attribute keys are
  // stripped the way tensor names are when modules are grouped.
  test::ModuleSpec dp;
  dp.module = "torch.nn.parallel.data_parallel";
  dp.cls = "DataParallel";
  dp.children = {{"module", net}};
  Loaded l = load(test::checkpoint_zip(test::module_pickle(dp), module_storages()));
  EXPECT_EQ(l.ck.form, "zip whole module (torch.nn.parallel.data_parallel.DataParallel)");
  EXPECT_EQ(names_of(l.ck), (std::vector<std::string>{"module.rnn.weight_ih_l0"}));
  EXPECT_EQ(l.ck.attributes.at("rnn.nonlinearity"), "relu");
  EXPECT_EQ(l.ck.attributes.at("rnn.mode"), "RNN_RELU");
  EXPECT_EQ(l.ck.attributes.at("rnn.batch_first"), "false");
}

TEST(Checkpoint, WholeModuleUnderACheckpointKey) {
  PickleBuilder p;
  p.proto(2).empty_dict().mark().str("epoch").integer(4).str("model");
  test::emit_module(p, net_module());
  p.str("optimizer").empty_dict();
  p.setitems().stop();
  Loaded l = load(test::checkpoint_zip(p.bytes, module_storages()));
  EXPECT_EQ(l.ck.form, "zip training checkpoint (key 'model', whole module __main__.Net)");
  EXPECT_EQ(l.ck.tensors.size(), 6u);
  EXPECT_EQ(l.ck.attributes.at("lstm.batch_first"), "true");
  EXPECT_EQ(ignored_reason(l.ck, "optimizer"), "optimizer state");

  // Two modules under unknown keys: the user chooses.
  PickleBuilder two;
  two.proto(2).empty_dict().mark().str("student");
  test::emit_module(two, net_module());
  two.str("teacher");
  test::emit_module(two, net_module());
  two.setitems().stop();
  const Bytes zip = test::checkpoint_zip(two.bytes, module_storages());
  const std::string msg = load_error(zip);
  EXPECT_TRUE(contains(msg, "several whole modules in the checkpoint: 'student' (__main__.Net), 'teacher'")) << msg;
  EXPECT_TRUE(contains(msg, "--key")) << msg;
  LoadOptions o;
  o.key = "teacher";
  EXPECT_EQ(load(zip, o).ck.form, "zip training checkpoint (key 'teacher', whole module __main__.Net)");
  // --key on a file that is one module is a mistake worth saying.
  const std::string root_key = load_error(test::checkpoint_zip(test::module_pickle(net_module()), module_storages()), o);
  EXPECT_TRUE(contains(root_key, "--key 'teacher' given, but the file holds a whole pickled module")) << root_key;
}

TEST(Checkpoint, SharedSubmoduleAppearsUnderEveryPath) {
  // state_dict() names a shared module once per path; so does the walk.
  PickleBuilder p;
  p.proto(2).global("__main__", "Net").empty_tuple().newobj().empty_dict().mark();
  p.str("_parameters").global("collections", "OrderedDict").empty_tuple().reduce();
  p.str("_modules").global("collections", "OrderedDict").empty_tuple().reduce().mark();
  p.str("a");
  test::emit_module(p, linear_module());
  p.binput(200);
  p.str("b").binget(200);
  p.setitems().setitems().build().stop();
  Loaded l = load(test::checkpoint_zip(p.bytes, module_storages()));
  EXPECT_EQ(names_of(l.ck), (std::vector<std::string>{"a.weight", "a.bias", "b.weight", "b.bias"}));
}

// Net(_modules={name: <memo 0, the Net itself or an ancestor>}).
TEST(Checkpoint, WholeModuleCyclesAreRefused) {
  PickleBuilder self;
  self.proto(2).global("__main__", "Net").empty_tuple().newobj().binput(0).empty_dict().mark();
  self.str("_parameters").global("collections", "OrderedDict").empty_tuple().reduce();
  self.str("_modules").global("collections", "OrderedDict").empty_tuple().reduce().mark();
  self.str("me").binget(0);
  self.setitems().setitems().build().stop();
  const std::string msg = load_error(test::checkpoint_zip(self.bytes, {}));
  EXPECT_TRUE(contains(msg, "module cycle: submodule 'me' (class __main__.Net) is the module '<root>'")) << msg;

  // root -> enc -> back to enc's parent's child: enc.inner.loop is enc.
  PickleBuilder deep;
  deep.proto(2).global("__main__", "Net").empty_tuple().newobj().empty_dict().mark();
  deep.str("_parameters").global("collections", "OrderedDict").empty_tuple().reduce();
  deep.str("_modules").global("collections", "OrderedDict").empty_tuple().reduce().mark();
  deep.str("enc").global("__main__", "Enc").empty_tuple().newobj().binput(1).empty_dict().mark();
  deep.str("_modules").global("collections", "OrderedDict").empty_tuple().reduce().mark();
  deep.str("inner").global("__main__", "Inner").empty_tuple().newobj().empty_dict().mark();
  deep.str("_modules").global("collections", "OrderedDict").empty_tuple().reduce().mark();
  deep.str("loop").binget(1);
  deep.setitems().setitems().build();  // Inner
  deep.setitems().setitems().build();  // Enc
  deep.setitems().setitems().build().stop();
  const std::string d = load_error(test::checkpoint_zip(deep.bytes, {}));
  EXPECT_TRUE(contains(d, "submodule 'enc.inner.loop' (class __main__.Enc) is the module 'enc'")) << d;
}

TEST(Checkpoint, MaliciousWholeModuleIsRefusedBeforeAnythingRuns) {
  // The payload sits where a submodule would: GLOBAL 'os system' + REDUCE.
  for (const char* module : {"os", "posix", "subprocess"}) {
    PickleBuilder p;
    p.proto(2).global("__main__", "Net").empty_tuple().newobj().empty_dict().mark();
    p.str("_parameters").global("collections", "OrderedDict").empty_tuple().reduce();
    p.str("_modules").global("collections", "OrderedDict").empty_tuple().reduce().mark();
    p.str("evil").global(module, "system").str("touch /tmp/ferry_pwned").tuple_n(1).reduce();
    p.setitems().setitems().build().stop();
    const std::string msg = load_error(test::checkpoint_zip(p.bytes, {}));
    EXPECT_TRUE(contains(msg, std::string("refused global '") + module + ".system'")) << msg;
    EXPECT_TRUE(contains(msg, "record 'archive/data.pkl'")) << msg;
    EXPECT_TRUE(contains(msg, "at byte ")) << msg;
  }
  // A user class may be NEWOBJ'd (inert) but never called.
  PickleBuilder call;
  call.proto(2).global("__main__", "Net").empty_tuple().newobj().empty_dict().mark();
  call.str("_modules").global("collections", "OrderedDict").empty_tuple().reduce().mark();
  call.str("x").global("__main__", "Evil").empty_tuple().reduce();
  call.setitems().setitems().build().stop();
  const std::string msg = load_error(test::checkpoint_zip(call.bytes, {}));
  EXPECT_TRUE(contains(msg, "refused REDUCE of '__main__.Evil'")) << msg;
  EXPECT_FALSE(std::ifstream("/tmp/ferry_pwned").good());
}

// A call of a class reference that is not allowlisted (torch 0.3/0.4's
// _backend = torch.nn.backends.thnn._get_thnn_function_backend()) is kept,
// never made, where it is a plain attribute of a pickled module; anywhere
// else it is refused as REDUCE always refused it, saying where it was.
namespace placeholders {

// __main__.Net with _backend = <call>, `extra` = {"act": <call>}, one
// parameter "w" (storage "0"), and `more` written into its state last.
void module_with_backend(PickleBuilder& p, const std::function<void(PickleBuilder&)>& more = {}) {
  p.global("__main__", "Net").empty_tuple().newobj().empty_dict().mark();
  p.str("_backend").global("torch.nn.backends.thnn", "_get_thnn_function_backend").empty_tuple().reduce().binput(9);
  p.str("extra").empty_dict().str("act").global("__main__", "make_act").empty_tuple().reduce().setitem();
  p.str("_parameters").global("collections", "OrderedDict").empty_tuple().reduce().mark();
  p.str("w");
  test::emit_tensor(p, spec("w", "0", 2, {2}));
  p.setitems();
  if (more) more(p);
  p.setitems().build();
}

Bytes zip_of(const PickleBuilder& p) { return test::checkpoint_zip(p.bytes, {{"0", f32({1, 2})}}); }

}  // namespace placeholders

TEST(Checkpoint, CallsNeverMadeAreKeptAsModuleAttributes) {
  PickleBuilder p;
  p.proto(2);
  placeholders::module_with_backend(p);
  p.stop();
  Loaded l = load(placeholders::zip_of(p));
  EXPECT_EQ(l.ck.form, "zip whole module (__main__.Net)");
  ASSERT_EQ(l.ck.tensors.size(), 1u);
  EXPECT_EQ(l.ck.tensors[0].name, "w");
  EXPECT_EQ(to_float32(l.ck.tensors[0]), (std::vector<float>{1, 2}));
}

TEST(Checkpoint, CallsNeverMadeAreRefusedOutsideModuleAttributes) {
  const std::string refused = "refused REDUCE of '__main__.make' (not an allowlisted callable) at byte ";
  auto error_of = [](const PickleBuilder& p) { return load_error(placeholders::zip_of(p)); };
  {  // a state dict's value
    PickleBuilder p;
    p.proto(2).global("collections", "OrderedDict").empty_tuple().reduce().mark();
    p.str("w");
    test::emit_tensor(p, spec("w", "0", 2, {2}));
    p.str("x").global("__main__", "make").empty_tuple().reduce().setitems().stop();
    const std::string msg = error_of(p);
    EXPECT_TRUE(contains(msg, "record 'archive/data.pkl': " + refused)) << msg;
    EXPECT_TRUE(contains(msg, "(opcode 0x52 REDUCE): its result is the root['x']; a call ferry never makes is kept only "
                              "as a plain attribute of a pickled nn.Module")) << msg;
  }
  {  // the root
    PickleBuilder p;
    p.proto(2).global("__main__", "make").empty_tuple().reduce().stop();
    const std::string msg = error_of(p);
    EXPECT_TRUE(contains(msg, refused + "18 (opcode 0x52 REDUCE): its result is the root;")) << msg;
  }
  {  // a module's parameter
    PickleBuilder p;
    p.proto(2);
    placeholders::module_with_backend(p, [](PickleBuilder& q) {
      q.str("_buffers").global("collections", "OrderedDict").empty_tuple().reduce();
      q.str("b").global("__main__", "make").empty_tuple().reduce().setitem();
    });
    p.stop();
    const std::string msg = error_of(p);
    EXPECT_TRUE(contains(msg, "its result is the root._buffers['b']")) << msg;
  }
  {  // a tensor's storage, inside a module attribute
    PickleBuilder p;
    p.proto(2);
    placeholders::module_with_backend(p, [](PickleBuilder& q) {
      q.str("cache").global("torch._utils", "_rebuild_tensor_v2").mark();
      q.global("__main__", "make").empty_tuple().reduce();
      q.integer(0).mark().integer(1).tuple().mark().integer(1).tuple().boolean(false);
      q.global("collections", "OrderedDict").empty_tuple().reduce().tuple().reduce();
    });
    p.stop();
    const std::string msg = error_of(p);
    EXPECT_TRUE(contains(msg, "its result is the root.cache (its storage)")) << msg;
  }
  {  // the module's own _backend, shared with a top-level entry (memo 9)
    PickleBuilder p;
    p.proto(2).empty_dict().mark().str("model");
    placeholders::module_with_backend(p);
    p.str("backend").binget(9).setitems().stop();
    const std::string msg = error_of(p);
    EXPECT_TRUE(contains(msg, "refused REDUCE of 'torch.nn.backends.thnn._get_thnn_function_backend'")) << msg;
    EXPECT_TRUE(contains(msg, "its result is the root['backend']")) << msg;
  }
}

TEST(Checkpoint, ObjectsThatAreNotModules) {
  PickleBuilder config;
  config.proto(2).global("__main__", "Config").empty_tuple().newobj().empty_dict().str("lr").binfloat(0.1).setitem().build().stop();
  const std::string a = load_error(test::checkpoint_zip(config.bytes, {}));
  EXPECT_TRUE(contains(a, "module '<root>' (class __main__.Config): not an nn.Module")) << a;

  PickleBuilder stateless;
  stateless.proto(2).global("__main__", "Net").empty_tuple().newobj().stop();
  EXPECT_TRUE(contains(load_error(test::checkpoint_zip(stateless.bytes, {})), "no attribute dict"));

  PickleBuilder child;
  child.proto(2).global("__main__", "Net").empty_tuple().newobj().empty_dict().mark();
  child.str("_modules").global("collections", "OrderedDict").empty_tuple().reduce().mark();
  child.str("head").integer(5);
  child.setitems().setitems().build().stop();
  const std::string c = load_error(test::checkpoint_zip(child.bytes, {}));
  EXPECT_TRUE(contains(c, "submodule 'head' is a int, not a module")) << c;

  PickleBuilder params;
  params.proto(2).global("__main__", "Net").empty_tuple().newobj().empty_dict().mark();
  params.str("_parameters").empty_list();
  params.setitems().build().stop();
  EXPECT_TRUE(contains(load_error(test::checkpoint_zip(params.bytes, {})), "_parameters is a list, not a dict"));
}

// ---------------------------------------------------------------------------
// to_float32_range: any chunking of any view equals the whole tensor.

struct HandView {
  std::vector<uint8_t> bytes;
  TensorRef t;
};

HandView hand_view(DType dtype, std::vector<int64_t> shape, std::vector<int64_t> stride, int64_t offset,
                   size_t storage_elements, bool big_endian) {
  HandView h;
  const size_t esize = dtype_size(dtype);
  h.bytes.resize(storage_elements * esize);
  for (size_t i = 0; i < storage_elements; ++i) {
    // Small integers: exact in every float dtype.
    const float v = float(int(i % 97) - 48);
    uint8_t b[8];
    if (dtype == DType::F32) std::memcpy(b, &v, 4);
    if (dtype == DType::F64) { const double d = v; std::memcpy(b, &d, 8); }
    if (dtype == DType::BF16) { uint32_t u; std::memcpy(&u, &v, 4); const uint16_t x = uint16_t(u >> 16); std::memcpy(b, &x, 2); }
    if (dtype == DType::F16) {
      // |v| <= 48 is exact in half: build it from its float bits.
      uint32_t u;
      std::memcpy(&u, &v, 4);
      const uint32_t sign = (u >> 16) & 0x8000, exp = (u >> 23) & 0xFF, mant = u & 0x7FFFFF;
      const uint16_t x = v == 0 ? uint16_t(sign) : uint16_t(sign | ((exp - 112) << 10) | (mant >> 13));
      std::memcpy(b, &x, 2);
    }
    if (big_endian) std::reverse(b, b + esize);
    std::memcpy(h.bytes.data() + i * esize, b, esize);
  }
  auto s = std::make_shared<Storage>();
  s->data = h.bytes.data();
  s->nbytes = h.bytes.size();
  s->numel = storage_elements;
  s->dtype = dtype;
  s->big_endian = big_endian;
  h.t.name = "v";
  h.t.dtype = dtype;
  h.t.shape = std::move(shape);
  h.t.stride = std::move(stride);
  h.t.offset = offset;
  h.t.storage = s;
  return h;
}

// The value at a multi-index, computed directly from the definition.
std::vector<float> reference_values(const TensorRef& t) {
  std::vector<float> out;
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, at = t.offset;
    for (size_t d = t.shape.size(); d-- > 0;) {
      at += (rest % t.shape[d]) * t.stride[d];
      rest /= t.shape[d];
    }
    out.push_back(float(int(at % 97) - 48));
  }
  return out;
}

TEST(Checkpoint, ToFloat32RangeChunksEqualTheWholeTensor) {
  struct Case {
    DType dtype;
    std::vector<int64_t> shape, stride;
    int64_t offset;
    size_t storage;
    bool big_endian;
    bool contiguous;
  };
  const Case cases[] = {
      {DType::F32, {4, 5}, {5, 1}, 3, 23, false, true},          // contiguous, offset
      {DType::F32, {5, 4}, {1, 5}, 0, 20, false, false},         // transposed
      {DType::F16, {3, 1, 4}, {1, 999, 3}, 2, 14, false, false}, // permuted, size-1 dim with a wild stride
      {DType::F16, {2, 1, 3}, {3, 999, 1}, 1, 7, false, true},   // contiguous despite the wild stride
      {DType::BF16, {2, 3, 4}, {12, 4, 1}, 0, 24, true, true},   // big-endian contiguous
      {DType::F64, {3, 4, 2}, {1, 6, 3}, 1, 30, true, false},    // strided, big-endian
      {DType::F16, {7}, {3}, 1, 20, false, false},               // every third element
      {DType::F32, {}, {}, 5, 6, false, true},                   // a scalar
  };
  for (const Case& c : cases) {
    HandView h = hand_view(c.dtype, c.shape, c.stride, c.offset, c.storage, c.big_endian);
    const std::vector<float> want = reference_values(h.t);
    ASSERT_EQ(to_float32(h.t), want) << dtype_name(c.dtype) << " " << h.t.shape.size();
    EXPECT_EQ(is_contiguous(h.t), c.contiguous);
    const uint64_t n = want.size();
    for (uint64_t chunk = 1; chunk <= n; ++chunk) {
      std::vector<float> got(n, -1000);
      for (uint64_t begin = 0; begin < n; begin += chunk)
        to_float32_range(h.t, got.data() + begin, begin, std::min(chunk, n - begin));
      ASSERT_EQ(got, want) << "chunk " << chunk;
    }
  }
  HandView h = hand_view(DType::F32, {2, 3}, {3, 1}, 0, 6, false);
  float out[6];
  EXPECT_NO_THROW(to_float32_range(h.t, out, 6, 0));
  try {
    to_float32_range(h.t, out, 4, 3);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "elements [4, 7) requested of a tensor of 6")) << e.what();
  }
  EXPECT_THROW(to_float32_range(h.t, out, UINT64_MAX, 2), Error);
  h.t.shape = {3, 3};  // now past its storage: refused on every call
  EXPECT_THROW(to_float32_range(h.t, out, 0, 1), Error);
}

// Golden files written by real torch (tests/fixtures/models, made by
// make_fixtures.py) load or fail with a clean Error naming the file; the
// files under bad/ must all be refused. Skipped while there are none.
TEST(Checkpoint, FixturesLoadOrFailCleanly) {
  int seen = 0;
  for (const std::string sub : {"", "/models", "/bad"}) {
    const std::string dir_path = std::string(FERRY_FIXTURES_DIR) + sub;
    DIR* dir = opendir(dir_path.c_str());
    if (!dir) continue;
    while (dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      const bool pt = name.size() > 3 && name.compare(name.size() - 3, 3, ".pt") == 0;
      const bool bin = name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0;
      if (!pt && !bin) continue;
      ++seen;
      const std::string path = dir_path + "/" + name;
      SCOPED_TRACE(path);
      try {
        MappedFile m(path);
        Checkpoint ck = load_checkpoint(m);
        EXPECT_NE(sub, "/bad") << "a bad fixture was accepted";
        for (const TensorRef& t : ck.tensors) EXPECT_EQ(to_float32(t).size(), size_t(t.numel()));
      } catch (const Error& err) {
        EXPECT_TRUE(contains(err.what(), name)) << err.what();
      }
    }
    closedir(dir);
  }
  if (seen == 0) GTEST_SKIP() << "no fixtures yet";
}

}  // namespace
}  // namespace ferry::conv

#endif  // FERRY_HAVE_CONVERTER
