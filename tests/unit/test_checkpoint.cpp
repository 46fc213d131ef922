// Checkpoint reading (converter/src/checkpoint.h) on zip checkpoints built
// byte by byte, as a GPU machine's torch.save writes them ('cuda:0').
// The converter is optional (FERRY_CONVERTER); these tests need it.
#ifdef FERRY_HAVE_CONVERTER

#include <gtest/gtest.h>

#include <cmath>
#include <dirent.h>
#include <limits>
#include <memory>
#include <string>

#include "checkpoint.h"
#include "error.h"
#include "mapped_file.h"
#include "pt_builder.h"

namespace ferry::conv {
namespace {

using test::Bytes;
using test::PickleBuilder;
using test::TensorSpec;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Keeps the file and its mapping alive as long as the tensors that view it.
struct Loaded {
  std::unique_ptr<test::TempFile> file;
  std::unique_ptr<MappedFile> map;
  Checkpoint ck;
};

Loaded load(const Bytes& bytes, const LoadOptions& options = {}) {
  Loaded l;
  l.file = std::make_unique<test::TempFile>(bytes);
  l.map = std::make_unique<MappedFile>(l.file->path());
  l.ck = load_checkpoint(*l.map, options);
  return l;
}

std::string load_error(const Bytes& bytes, const LoadOptions& options = {}) {
  try {
    load(bytes, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

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
  EXPECT_EQ(ignored_reason(l.ck, "ema"), "not selected (dict)");

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

TEST(Checkpoint, WholeModuleIsNotSupportedYet) {
  PickleBuilder p;
  p.proto().global("__main__", "Net").empty_tuple().newobj().empty_dict().build().stop();
  const std::string msg = load_error(test::checkpoint_zip(p.bytes, {}));
  EXPECT_TRUE(contains(msg, "__main__.Net")) << msg;
  EXPECT_TRUE(contains(msg, "not supported yet")) << msg;
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
  EXPECT_TRUE(contains(load_error(tar), "pre-0.3 PyTorch tar format"));

  Bytes legacy = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e};
  EXPECT_TRUE(contains(load_error(legacy), "legacy"));
  EXPECT_TRUE(contains(load_error(legacy), "not supported yet"));

  Bytes safetensors;
  test::put64(safetensors, 2);
  test::append(safetensors, "{}");
  EXPECT_TRUE(contains(load_error(safetensors), "safetensors"));

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
  test::TempFile file(zip);
  for (size_t i = 0; i < zip.size(); i += 3) {
    Bytes bad = zip;
    bad[i] ^= 0x5A;
    test::TempFile f(bad);
    try {
      MappedFile m(f.path());
      Checkpoint ck = load_checkpoint(m);
      for (const TensorRef& r : ck.tensors) to_float32(r);
    } catch (const Error&) {
    }
  }
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
