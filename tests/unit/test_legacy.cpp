// The legacy (pre-1.6, non-zip) torch.save stream (converter/src/legacy.cpp),
// built byte by byte as torch 1.13 writes it with
// _use_new_zipfile_serialization=False, storages tagged 'cuda:0'.
#ifdef FERRY_HAVE_CONVERTER

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
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
using test::LegacyStorage;
using test::PickleBuilder;
using test::TensorSpec;

using test::contains;
using test::load;
using test::load_error;
using test::Loaded;

TensorSpec legacy_spec(std::string name, std::string key, int64_t numel, std::vector<int64_t> size,
                       std::string cls = "FloatStorage") {
  TensorSpec t;
  t.name = std::move(name);
  t.key = std::move(key);
  t.storage_numel = numel;
  t.size = std::move(size);
  t.storage_class = std::move(cls);
  t.legacy = true;
  return t;
}

Bytes f32(std::vector<float> v) { return test::raw_bytes(v); }

// fc.weight [2, 3] and fc.bias [2], storages "0" and "1".
Bytes two_tensor_file() {
  return test::legacy_checkpoint(
      test::state_dict_pickle({legacy_spec("fc.weight", "0", 6, {2, 3}), legacy_spec("fc.bias", "1", 2, {2})}),
      {{"0", 6, f32({0, 1, 2, 3, 4, 5})}, {"1", 2, f32({1.5f, -2})}});
}

TEST(Legacy, StateDict) {
  Loaded l = load(two_tensor_file());
  EXPECT_EQ(l.ck.form, "legacy (pre-1.6) state_dict");
  ASSERT_EQ(l.ck.tensors.size(), 2u);
  EXPECT_EQ(l.ck.tensors[0].name, "fc.weight");
  EXPECT_EQ(l.ck.tensors[0].storage->location, "cuda:0");
  EXPECT_FALSE(l.ck.tensors[0].storage->big_endian);  // always little-endian
  EXPECT_EQ(to_float32(l.ck.tensors[0]), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(to_float32(l.ck.tensors[1]), (std::vector<float>{1.5f, -2}));
  // The bytes are views into the mapped file, not copies.
  EXPECT_GE(l.ck.tensors[1].storage->data, l.map->data());
  EXPECT_LT(l.ck.tensors[1].storage->data, l.map->data() + l.map->size());
}

TEST(Legacy, ViewsSharedStoragesAndHalf) {
  // Two tensors view one root storage through view metadata (offset and
  // size in elements); one more shares the root directly; a half storage.
  TensorSpec a = legacy_spec("a", "0", 10, {3});
  a.view_key = "v0";
  a.view_offset = 2;
  a.view_size = 5;  // a = root[2:7][0:3]
  TensorSpec b = legacy_spec("b", "0", 10, {2});
  b.view_key = "v0";
  b.view_offset = 2;
  b.view_size = 5;
  b.offset = 3;  // root[5:7]
  TensorSpec c = legacy_spec("c", "0", 10, {2, 2});
  c.stride = {1, 2};
  TensorSpec h = legacy_spec("h", "1", 2, {2}, "HalfStorage");
  const Bytes file = test::legacy_checkpoint(
      test::state_dict_pickle({a, b, c, h}),
      {{"0", 10, f32({0, 1, 2, 3, 4, 5, 6, 7, 8, 9})}, {"1", 2, test::raw_bytes(std::vector<uint16_t>{0x3C00, 0xC100})}});
  Loaded l = load(file);
  ASSERT_EQ(l.ck.tensors.size(), 4u);
  EXPECT_EQ(to_float32(l.ck.tensors[0]), (std::vector<float>{2, 3, 4}));
  EXPECT_EQ(to_float32(l.ck.tensors[1]), (std::vector<float>{5, 6}));
  EXPECT_EQ(to_float32(l.ck.tensors[2]), (std::vector<float>{0, 2, 1, 3}));
  EXPECT_EQ(to_float32(l.ck.tensors[3]), (std::vector<float>{1, -2.5f}));
  EXPECT_EQ(l.ck.tensors[0].storage, l.ck.tensors[1].storage);  // one view object
  EXPECT_EQ(l.ck.tensors[0].storage->key, "v0");

  // A view's tensor is bounds-checked against the view, not the root.
  TensorSpec past = a;
  past.offset = 4;  // view has 5 elements; [4, 7) does not fit
  const std::string msg = load_error(test::legacy_checkpoint(test::state_dict_pickle({past}), {{"0", 10, f32(std::vector<float>(10))}}));
  EXPECT_TRUE(contains(msg, "tensor 'a'")) << msg;
  EXPECT_TRUE(contains(msg, "past the end of its storage of 5 elements")) << msg;
}

TEST(Legacy, BadViewMetadata) {
  TensorSpec a = legacy_spec("a", "0", 4, {1});
  a.view_key = "v";
  a.view_offset = 3;
  a.view_size = 2;  // [3, 5) of 4 elements
  std::string msg = load_error(test::legacy_checkpoint(test::state_dict_pickle({a}), {{"0", 4, f32({1, 2, 3, 4})}}));
  EXPECT_TRUE(contains(msg, "storage view 'v' (offset 3, size 2) reaches past the end of storage '0' of 4 elements")) << msg;
  EXPECT_TRUE(contains(msg, "main pickle (at byte ")) << msg;

  TensorSpec b = a;
  b.view_offset = 0;
  TensorSpec c = b;
  c.name = "c";
  c.view_size = 1;  // same view key, different extent
  msg = load_error(test::legacy_checkpoint(test::state_dict_pickle({b, c}), {{"0", 4, f32({1, 2, 3, 4})}}));
  EXPECT_TRUE(contains(msg, "storage view 'v' is declared twice differently")) << msg;

  TensorSpec d = b;
  d.view_key = "0";  // a view named like its root
  msg = load_error(test::legacy_checkpoint(test::state_dict_pickle({d}), {{"0", 4, f32({1, 2, 3, 4})}}));
  EXPECT_TRUE(contains(msg, "storage view '0' is declared twice differently (or names a storage)")) << msg;

  TensorSpec e = b;
  e.view_key = "../x";
  EXPECT_TRUE(contains(load_error(test::legacy_checkpoint(test::state_dict_pickle({e}), {{"0", 4, f32({1, 2, 3, 4})}})),
                       "invalid storage view key '../x'"));
}

TEST(Legacy, TruncatedStreamIsRefusedWithTheByteOffset) {
  const Bytes good = two_tensor_file();
  // Cut inside the last storage's bytes.
  const Bytes cut(good.begin(), good.end() - 3);
  std::string msg = load_error(cut);
  EXPECT_TRUE(contains(msg, "legacy stream: storage '1' (at byte ")) << msg;
  EXPECT_TRUE(contains(msg, "truncated: needs 8 bytes of data, 5 left")) << msg;
  // Cut inside an element count.
  const Bytes in_count(good.begin(), good.end() - 8 - 4);
  msg = load_error(in_count);
  EXPECT_TRUE(contains(msg, "truncated: its element count needs 8 bytes, 4 left")) << msg;
  // Cut inside the main pickle.
  const Bytes in_pickle(good.begin(), good.begin() + long(test::legacy_header().size()) + 40);
  msg = load_error(in_pickle);
  EXPECT_TRUE(contains(msg, "legacy stream, main pickle (at byte ")) << msg;
  EXPECT_TRUE(contains(msg, "truncated")) << msg;
  // Every prefix is refused cleanly.
  for (size_t n = 0; n < good.size(); ++n) {
    const Bytes prefix(good.begin(), good.begin() + long(n));
    EXPECT_FALSE(load_error(prefix).empty()) << n;
  }
}

TEST(Legacy, StorageCountMismatch) {
  const Bytes pkl = test::state_dict_pickle({legacy_spec("w", "0", 4, {4})});
  std::string msg = load_error(test::legacy_checkpoint(pkl, {{"0", 3, f32({1, 2, 3})}}));
  EXPECT_TRUE(contains(msg, "storage '0' (at byte ")) << msg;
  EXPECT_TRUE(contains(msg, "holds 3 elements, but the pickle declares 4")) << msg;
  msg = load_error(test::legacy_checkpoint(pkl, {{"0", -1, f32({1, 2, 3, 4})}}));
  EXPECT_TRUE(contains(msg, "holds -1 elements")) << msg;
  // A declared size whose bytes overflow 64 bits never reaches a multiply.
  const Bytes huge = test::state_dict_pickle({legacy_spec("w", "0", int64_t{1} << 62, {1}, "DoubleStorage")});
  EXPECT_TRUE(contains(load_error(test::legacy_checkpoint(huge, {{"0", 1, f32({1, 2})}})), "size overflows"));
}

TEST(Legacy, KeyListMustMatchTheDeclaredStorages) {
  const Bytes pkl = test::state_dict_pickle({legacy_spec("a", "0", 1, {1}), legacy_spec("b", "1", 1, {1})});
  // A storage the pickle uses but the list omits.
  std::string msg = load_error(test::legacy_checkpoint(pkl, {{"0", 1, f32({1})}}));
  EXPECT_TRUE(contains(msg, "storage '1' is used by the pickle but has no data")) << msg;
  // A key nobody declared.
  msg = load_error(test::legacy_checkpoint(pkl, {{"0", 1, f32({1})}, {"1", 1, f32({2})}, {"7", 1, f32({3})}}));
  EXPECT_TRUE(contains(msg, "the storage key list names '7', which the main pickle never declared")) << msg;
  // A key listed twice.
  msg = load_error(test::legacy_checkpoint(pkl, {{"0", 1, f32({1})}, {"1", 1, f32({2})}, {"1", 1, f32({2})}}));
  EXPECT_TRUE(contains(msg, "storage '1' is listed twice")) << msg;
  // The list names storages in its own order; data follows that order.
  Loaded l = load(test::legacy_checkpoint(pkl, {{"1", 1, f32({20})}, {"0", 1, f32({10})}}));
  EXPECT_EQ(to_float32(l.ck.tensors[0]), (std::vector<float>{10}));
  EXPECT_EQ(to_float32(l.ck.tensors[1]), (std::vector<float>{20}));
  // Bytes after the last storage.
  Bytes trailing = test::legacy_checkpoint(pkl, {{"0", 1, f32({1})}, {"1", 1, f32({2})}});
  trailing.push_back(0);
  msg = load_error(trailing);
  EXPECT_TRUE(contains(msg, "1 unexpected bytes after the last storage")) << msg;
  // The key list must be a list of strings.
  Bytes not_list = test::legacy_header();
  test::append(not_list, pkl);
  test::append(not_list, PickleBuilder().proto(2).empty_dict().stop().bytes);
  EXPECT_TRUE(contains(load_error(not_list), "the storage key list (at byte "));
}

TEST(Legacy, HeaderPickles) {
  std::string msg = load_error(test::legacy_header(1000));
  EXPECT_TRUE(contains(msg, "unsupported protocol version 1000 (expected 1001)")) << msg;

  // A pickle that opens with another number is not a legacy stream at all.
  const Bytes other_number = {0x80, 0x02, 0x8a, 0x0b, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20,
                              0x6a, 0xa8, 0x50, 0x19, 0x01, 0x2e};
  EXPECT_TRUE(contains(load_error(other_number), "not a torch.save checkpoint"));

  PickleBuilder p;
  p.proto(2).raw({0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19}).stop();
  p.proto(2).integer(1001).stop();
  p.proto(2).empty_list().stop();
  msg = load_error(p.bytes);
  EXPECT_TRUE(contains(msg, "sys_info is a list, not a dict")) << msg;
}

TEST(Legacy, MaliciousMainPickleIsRefused) {
  Bytes file = test::legacy_header();
  PickleBuilder p;
  p.proto(2).global("posix", "system").str("touch /tmp/ferry_pwned").tuple_n(1).reduce().stop();
  test::append(file, p.bytes);
  const std::string msg = load_error(file);
  EXPECT_TRUE(contains(msg, "refused global 'posix.system'")) << msg;
  EXPECT_TRUE(contains(msg, "legacy stream, main pickle")) << msg;

  // Persistent ids other than storages and module classes are refused.
  Bytes other = test::legacy_header();
  PickleBuilder q;
  q.proto(2).mark().str("tensor").str("0").tuple().binpersid().stop();
  test::append(other, q.bytes);
  EXPECT_TRUE(contains(load_error(other), "('storage', type, key, location, numel, view_metadata)"));
  // ('module', ...) must name a class, not a callable.
  Bytes callable = test::legacy_header();
  PickleBuilder r;
  r.proto(2).mark().str("module").global("torch._utils", "_rebuild_tensor_v2").none().none().tuple().binpersid().stop();
  test::append(callable, r.bytes);
  EXPECT_TRUE(contains(load_error(callable), "which is not a module class"));
}

TEST(Legacy, WholeModuleWithModuleClassPersistentIds) {
  // torch.save(model) in the legacy format: every nn.Module class is
  // written as BINPERSID ('module', class, source_file, source).
  test::ModuleSpec fc;
  fc.legacy_class_pid = true;
  fc.parameters = {legacy_spec("weight", "0", 2, {1, 2}), legacy_spec("bias", "1", 1, {1})};
  test::ModuleSpec net;
  net.module = "__main__";
  net.cls = "Net";
  net.legacy_class_pid = true;
  net.children = {{"fc", fc}};
  net.attributes = {{"batch_first", "True"}};
  const Bytes file = test::legacy_checkpoint(test::module_pickle(net), {{"0", 2, f32({1, 2})}, {"1", 1, f32({3})}});
  Loaded l = load(file);
  EXPECT_EQ(l.ck.form, "legacy (pre-1.6) whole module (__main__.Net)");
  ASSERT_EQ(l.ck.tensors.size(), 2u);
  EXPECT_EQ(l.ck.tensors[0].name, "fc.weight");
  EXPECT_EQ(to_float32(l.ck.tensors[1]), (std::vector<float>{3}));
  EXPECT_EQ(l.ck.attributes.at("batch_first"), "true");
}

// Whole modules as torch 0.2-0.4 saved them (tests/fixtures/old_torch,
// make_old_torch_fixtures.py: the same trained weights in each file, read
// back by torch 1.13's own torch.load when they were made).
namespace old_torch {

const std::string kDir = std::string(FERRY_FIXTURES_DIR) + "/old_torch/";

Bytes file(const std::string& name) {
  std::ifstream f(kDir + name, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

const std::vector<std::string> kNames = {"lstm.weight_ih_l0", "lstm.weight_hh_l0", "lstm.bias_ih_l0",
                                         "lstm.bias_hh_l0", "fc.weight", "fc.bias"};

void expect_the_module(const Loaded& l) {
  ASSERT_EQ(l.ck.tensors.size(), kNames.size()) << l.ck.form;
  for (size_t i = 0; i < kNames.size(); ++i) EXPECT_EQ(l.ck.tensors[i].name, kNames[i]);
  EXPECT_EQ(l.ck.tensors[0].shape, (std::vector<int64_t>{32, 5}));
  EXPECT_EQ(l.ck.attributes.at("lstm.batch_first"), "true");
  EXPECT_EQ(l.ck.attributes.at("lstm.hidden_size"), "8");
  ASSERT_EQ(l.ck.module_objects.size(), 3u);
  EXPECT_EQ(l.ck.module_objects[1].class_name, "torch.nn.modules.rnn.LSTM");
  EXPECT_EQ(l.ck.module_objects[2].path, "fc");
}

}  // namespace old_torch

// torch 0.4: every module's _backend is REDUCE(torch.nn.backends.thnn.
// _get_thnn_function_backend, ()), kept inert; module classes come as
// ('module', class, source_file, source) persistent ids; the LSTM's four
// parameters view one flat 'cuda:0' storage at their offsets.
TEST(Legacy, Torch04WholeModuleWithThnnBackend) {
  Loaded l = load(old_torch::file("module_v04.pt"));
  EXPECT_EQ(l.ck.form, "legacy (pre-1.6) whole module (__main__.Net)");
  old_torch::expect_the_module(l);
  EXPECT_EQ(l.ck.tensors[0].storage, l.ck.tensors[3].storage);
  EXPECT_EQ(l.ck.tensors[0].storage->location, "cuda:0");
  EXPECT_EQ(l.ck.tensors[1].offset, 32 * 5);
}

// torch 0.3: _rebuild_tensor (v1), and Parameter pickled as a Variable:
// REDUCE(Parameter, (tensor,)) then BUILD((requires_grad, False, None)).
TEST(Legacy, Torch03WholeModule) {
  Loaded l = load(old_torch::file("module_v03.pt"));
  old_torch::expect_the_module(l);
  Loaded v04 = load(old_torch::file("module_v04.pt"));
  for (size_t i = 0; i < l.ck.tensors.size(); ++i)
    EXPECT_EQ(to_float32(l.ck.tensors[i]), to_float32(v04.ck.tensors[i])) << l.ck.tensors[i].name;
}

// torch 0.2: the tar format (legacy_tar.h), tensors as str(id) persistent
// ids resolved against the tensors and storages members.
TEST(LegacyTar, Torch02WholeModule) {
  Loaded l = load(old_torch::file("module_v02_tar.pt"));
  EXPECT_EQ(l.ck.form, "legacy tar (PyTorch 0.1-0.2) whole module (__main__.Net)");
  old_torch::expect_the_module(l);
  Loaded v04 = load(old_torch::file("module_v04.pt"));
  for (size_t i = 0; i < l.ck.tensors.size(); ++i)
    EXPECT_EQ(to_float32(l.ck.tensors[i]), to_float32(v04.ck.tensors[i])) << l.ck.tensors[i].name;
}

TEST(LegacyTar, CorruptionNeverCrashes) { test::load_every_corruption(old_torch::file("module_v02_tar.pt"), 1, {0xA5}); }

TEST(Legacy, CorruptionNeverCrashes) {
  test::load_every_corruption(two_tensor_file(), 1, {0xA5});
}

}  // namespace
}  // namespace ferry::conv

#endif  // FERRY_HAVE_CONVERTER
