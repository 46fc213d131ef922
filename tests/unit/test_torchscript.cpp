// TorchScript archives (converter/src/torchscript.cpp), built byte by byte
// the way torch.jit.save lays them out: data.pkl objects, Deflate code/
// records with Final constants, constants.pkl.
#ifdef FERRY_HAVE_CONVERTER

#include <gtest/gtest.h>

#include <fstream>
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

std::string ignored_reason(const Checkpoint& ck, const std::string& name) {
  for (const auto& [n, why] : ck.ignored)
    if (n == name) return why;
  return "";
}

TensorSpec ts(std::string key, int64_t numel, std::vector<int64_t> size) {
  TensorSpec t;
  t.key = std::move(key);
  t.storage_numel = numel;
  t.size = std::move(size);
  return t;
}

Bytes f32(std::vector<float> v) { return test::raw_bytes(v); }

// Net(batch_first=True attribute, buffer `mean`, rnn: RNN (mangled class),
// fc: Linear with its attributes in bias-then-weight order, cache: [tensor]).
Bytes net_data_pkl() {
  PickleBuilder p;
  p.proto(2).global("__torch__", "Net").empty_tuple().newobj().empty_dict().mark();
  p.str("training").boolean(false);
  p.str("batch_first").boolean(true);
  p.str("rnn").global("__torch__.torch.nn.modules.rnn.___torch_mangle_1", "RNN").empty_tuple().newobj();
  p.empty_dict().mark();
  p.str("weight_ih_l0");
  test::emit_tensor(p, ts("0", 2, {2, 1}));
  p.binput(10);
  p.str("weight_hh_l0");
  test::emit_tensor(p, ts("1", 4, {2, 2}));
  p.binput(11);
  p.str("training").boolean(false);
  p.str("_flat_weights_names").global("torch.jit._pickle", "restore_type_tag").empty_list().mark();
  p.str("weight_ih_l0").str("weight_hh_l0").appends().str("List[str]").tuple_n(2).reduce();
  p.str("_flat_weights").global("torch.jit._pickle", "build_tensorlist").mark().empty_list().mark();
  p.binget(10).binget(11).appends().tuple().reduce();
  p.setitems().build();
  p.str("mean");  // a buffer, listed in __buffers__, after a submodule
  test::emit_tensor(p, ts("5", 1, {1}));
  p.str("fc").global("__torch__.torch.nn.modules.linear", "Linear").empty_tuple().newobj().empty_dict().mark();
  p.str("bias");
  test::emit_tensor(p, ts("3", 1, {1}));
  p.str("weight");
  test::emit_tensor(p, ts("2", 2, {1, 2}));
  p.setitems().build();
  p.str("cache").empty_list();
  test::emit_tensor(p, ts("4", 1, {1}));
  p.append_();
  p.setitems().build().stop();
  return p.bytes;
}

std::vector<std::pair<std::string, Bytes>> net_storages() {
  return {{"0", f32({1, 2})}, {"1", f32({3, 4, 5, 6})}, {"2", f32({7, 8})},
          {"3", f32({9})},    {"4", f32({10})},        {"5", f32({11})}};
}

const std::vector<std::pair<std::string, std::string>> kNetCode = {
    {"__torch__.py",
     "class Net(Module):\n"
     "  __parameters__ = []\n"
     "  __buffers__ = [\"mean\", ]\n"
     "  training : bool\n"
     "  batch_first : bool\n"
     "  rnn : __torch__.torch.nn.modules.rnn.___torch_mangle_1.RNN\n"
     "  mean : Tensor\n"
     "  fc : __torch__.torch.nn.modules.linear.Linear\n"
     "  def forward(self: __torch__.Net,\n"
     "    x: Tensor) -> Tensor:\n"
     "    return x\n"},
    {"__torch__/torch/nn/modules/rnn/___torch_mangle_1.py",
     "class RNN(Module):\n"
     "  __parameters__ = [\"weight_ih_l0\", \"weight_hh_l0\", ]\n"
     "  __buffers__ = []\n"
     "  weight_ih_l0 : Tensor\n"
     "  weight_hh_l0 : Tensor\n"
     "  _flat_weights : List[Tensor]\n"
     "  batch_first : Final[bool] = False\n"
     "  mode : Final[str] = \"RNN_RELU\"\n"
     "  hidden_size : Final[int] = 2\n"
     "  bidirectional : Final[Tuple[bool, List[int]]] = (False, [1])\n"
     "  dropout : Final[float] = 0.\n"
     "  def forward(self: __torch__.torch.nn.modules.rnn.___torch_mangle_1.RNN,\n"
     "    input: Tensor) -> Tensor:\n"
     "    num_layers : Final[int] = 7\n"
     "    return input\n"},
    // Same class name, another module: must not apply to the mangled RNN.
    {"__torch__/torch/nn/modules/rnn.py",
     "class RNN(Module):\n"
     "  __parameters__ = []\n"
     "  batch_first : Final[bool] = True\n"},
    {"__torch__/torch/nn/modules/linear.py",
     "class Linear(Module):\n"
     "  __parameters__ = [\"weight\", \"bias\", ]\n"
     "  __buffers__ = []\n"
     "  bias : Tensor\n"
     "  weight : Tensor\n"
     "  in_features : Final[int] = 2\n"},
};

// constants.pkl: (tensor, 3), the tensor in constants/0.
Bytes constants_pkl() {
  PickleBuilder p;
  p.proto(2).mark();
  test::emit_tensor(p, ts("0", 2, {2}));
  p.integer(3).tuple().stop();
  return p.bytes;
}

Bytes net_archive() {
  Bytes zip = test::torchscript_zip(net_data_pkl(), net_storages(), kNetCode, constants_pkl());
  return zip;
}

// torchscript_zip() with constants/0 added.
Bytes net_archive_with_constants() {
  test::ZipBuilder z;
  z.add("model/data.pkl", net_data_pkl());
  for (const auto& [key, data] : net_storages()) z.add("model/data/" + key, data);
  for (const auto& [name, text] : kNetCode) {
    const Bytes plain = test::bytes_of(text);
    z.add("model/code/" + name, test::deflate_stored_blocks(plain), false, 8, plain.size(), test::test_crc32(plain));
  }
  z.add("model/constants.pkl", constants_pkl());
  z.add("model/constants/0", f32({0.5f, 0.25f}));
  z.add("model/version", test::bytes_of("3\n"));
  return z.finish();
}

std::vector<std::string> names_of(const Checkpoint& ck) {
  std::vector<std::string> n;
  for (const TensorRef& t : ck.tensors) n.push_back(t.name);
  return n;
}

TEST(TorchScript, WeightsInStateDictOrder) {
  Loaded l = load(net_archive_with_constants());
  EXPECT_EQ(l.ck.form, "TorchScript archive (__torch__.Net)");
  // Own buffers first (Net has no parameters), then submodules; within a
  // module, the order __parameters__ gives.
  EXPECT_EQ(names_of(l.ck), (std::vector<std::string>{"mean", "rnn.weight_ih_l0", "rnn.weight_hh_l0", "fc.weight",
                                                      "fc.bias"}));
  EXPECT_EQ(to_float32(l.ck.tensors[2]), (std::vector<float>{3, 4, 5, 6}));
  EXPECT_EQ(to_float32(l.ck.tensors[3]), (std::vector<float>{7, 8}));
  EXPECT_EQ(l.ck.tensors[1].storage->location, "cuda:0");
  // _flat_weights repeats the RNN's parameters: dropped silently. The list
  // attribute holding a fresh tensor is listed; so is the code constant.
  EXPECT_EQ(ignored_reason(l.ck, "cache.0"), "tensor attribute that is not a parameter or buffer");
  EXPECT_EQ(ignored_reason(l.ck, "CONSTANTS.c0"), "TorchScript constant");
  EXPECT_EQ(l.ck.ignored.size(), 2u);
}

TEST(TorchScript, FinalConstantsMapToAttributePaths) {
  Loaded l = load(net_archive_with_constants());
  const auto& a = l.ck.attributes;
  EXPECT_EQ(a.at("batch_first"), "true");       // a plain attribute of the root, in data.pkl
  EXPECT_EQ(a.at("rnn.batch_first"), "false");  // Final in the mangled class's code, not rnn.py's
  EXPECT_EQ(a.at("rnn.mode"), "RNN_RELU");
  EXPECT_EQ(a.at("rnn.nonlinearity"), "relu");  // from the mode
  EXPECT_EQ(a.at("rnn.hidden_size"), "2");
  EXPECT_EQ(a.at("rnn.bidirectional"), "(False, [1])");  // nested brackets in the type
  EXPECT_EQ(a.count("rnn.num_layers"), 0u);     // a local in a method body, not the class
  EXPECT_EQ(a.count("rnn.dropout"), 0u);        // not a hyper-parameter ferry records
  EXPECT_EQ(a.count("fc.in_features"), 0u);
}

TEST(TorchScript, WithoutCodeWeightsStillLoad) {
  // Only constants.pkl marks it as TorchScript; classes are unknown, so every
  // object is walked as a module and tensors come in attribute order.
  Loaded l = load(test::torchscript_zip(net_data_pkl(), net_storages(), {}));
  EXPECT_EQ(names_of(l.ck), (std::vector<std::string>{"mean", "rnn.weight_ih_l0", "rnn.weight_hh_l0", "fc.bias",
                                                      "fc.weight"}));
  EXPECT_EQ(l.ck.attributes.count("rnn.batch_first"), 0u);
  EXPECT_EQ(l.ck.attributes.at("batch_first"), "true");
}

TEST(TorchScript, CodeBombsAreRefused) {
  // Declares more than the 16 MiB cap: refused before inflating anything.
  {
    test::ZipBuilder z;
    z.add("m/data.pkl", net_data_pkl());
    z.add("m/constants.pkl", test::bytes_of("\x80\x02)."));  // TorchScript to torch.load
    const Bytes small = test::deflate_stored_blocks(test::bytes_of("class Net(Module):\n"));
    z.add("m/code/__torch__.py", small, false, 8, (uint64_t{16} << 20) + 1);
    const std::string msg = load_error(z.finish());
    EXPECT_TRUE(contains(msg, "record 'm/code/__torch__.py': 16777217 bytes exceeds the limit of 16777216")) << msg;
  }
  // Declares 16 bytes, inflates to 4096: the inflater stops at the cap.
  {
    test::ZipBuilder z;
    z.add("m/data.pkl", net_data_pkl());
    z.add("m/constants.pkl", test::bytes_of("\x80\x02)."));  // TorchScript to torch.load
    const Bytes big = test::deflate_stored_blocks(Bytes(4096, ' '));
    z.add("m/code/__torch__.py", big, false, 8, 16);
    const std::string msg = load_error(z.finish());
    EXPECT_TRUE(contains(msg, "record 'm/code/__torch__.py': inflated data is larger than the declared 16 bytes")) << msg;
  }
  // A truncated Deflate stream.
  {
    test::ZipBuilder z;
    z.add("m/data.pkl", net_data_pkl());
    z.add("m/constants.pkl", test::bytes_of("\x80\x02)."));  // TorchScript to torch.load
    Bytes cut = test::deflate_stored_blocks(Bytes(100, ' '));
    cut.resize(50);
    z.add("m/code/__torch__.py", cut, false, 8, 100);
    EXPECT_TRUE(contains(load_error(z.finish()), "corrupt Deflate data"));
  }
}

// torch.load hands a zip to torch.jit.load only beside a constants.pkl:
// code/ records alone make no TorchScript archive to any of torch's readers.
TEST(TorchScript, CodeWithoutConstantsIsNoReadersTorchScript) {
  test::ZipBuilder z;
  z.add("m/data.pkl", net_data_pkl());
  const std::string code = "class Net(Module):\n";
  z.add("m/code/__torch__.py", test::bytes_of(code));
  const std::string msg = load_error(z.finish());
  EXPECT_TRUE(contains(msg, "TorchScript code (m/code/__torch__.py) without a constants.pkl record")) << msg;
}

TEST(TorchScript, MalformedArchives) {
  PickleBuilder dict;
  dict.proto(2).empty_dict().stop();
  std::string msg = load_error(test::torchscript_zip(dict.bytes, {}, kNetCode));
  EXPECT_TRUE(contains(msg, "record 'model/data.pkl': holds a dict, not a TorchScript module object")) << msg;

  PickleBuilder cycle;
  cycle.proto(2).global("__torch__", "Net").empty_tuple().newobj().binput(0).empty_dict().mark();
  cycle.str("again").binget(0).setitems().build().stop();
  msg = load_error(test::torchscript_zip(cycle.bytes, {}, {}));
  EXPECT_TRUE(contains(msg, "TorchScript object cycle: attribute 'again' (class __torch__.Net) contains itself")) << msg;

  PickleBuilder evil;
  evil.proto(2).global("__torch__", "Net").empty_tuple().newobj().empty_dict().mark();
  evil.str("x").global("os", "system").str("touch /tmp/ferry_pwned").tuple_n(1).reduce();
  evil.setitems().build().stop();
  msg = load_error(test::torchscript_zip(evil.bytes, {}, kNetCode));
  EXPECT_TRUE(contains(msg, "refused global 'os.system'")) << msg;
  EXPECT_FALSE(std::ifstream("/tmp/ferry_pwned").good());

  const std::string missing = load_error(test::torchscript_zip(net_data_pkl(), {{"0", f32({1, 2})}}, kNetCode));
  EXPECT_TRUE(contains(missing, "storage record 'model/data/1' not found")) << missing;

  PickleBuilder constants;
  constants.proto(2).empty_list().stop();
  msg = load_error(test::torchscript_zip(net_data_pkl(), net_storages(), kNetCode, constants.bytes));
  EXPECT_TRUE(contains(msg, "record 'model/constants.pkl': holds a list, not a tuple of constants")) << msg;

  LoadOptions o;
  o.key = "model";
  EXPECT_TRUE(contains(load_error(net_archive(), o), "--key does not apply to a TorchScript archive"));
}

TEST(TorchScript, OddCodeIsReadAsTextOnly) {
  // Lines that look like declarations but are not, and files whose path is
  // not a module name, change nothing.
  std::vector<std::pair<std::string, std::string>> code = kNetCode;
  code.push_back({"__torch__/bad-name.py", "class Net(Module):\n  batch_first : Final[bool] = False\n"});
  code.push_back({"__torch__/odd.py",
                  "class \n"
                  "class Odd(Module:\n"
                  "  batch_first : Final[bool = True\n"
                  "  batch_first : Final[bool]\n"
                  "  __parameters__ = [\"a\", unquoted]\n"
                  "\n"
                  "def f() -> None:\n"
                  "  batch_first : Final[bool] = True\n"});
  Loaded l = load(test::torchscript_zip(net_data_pkl(), net_storages(), code));
  EXPECT_EQ(l.ck.attributes.at("batch_first"), "true");
  EXPECT_EQ(l.ck.attributes.at("rnn.batch_first"), "false");
  EXPECT_EQ(l.ck.tensors.size(), 5u);
}

// A module whose class defines __getstate__ and __setstate__: torch.jit.save
// pickles what __getstate__ returns (here a tuple) and torch.jit.load passes
// it to __setstate__. `state` is the pickled head state: a tuple (weight,
// bias, False) or a dict {"w": weight, "b": bias} (`named`: {"weight": ...,
// "bias": ...}, the attribute dict torch writes without __getstate__).
Bytes setstate_data_pkl(bool dict_state, bool named) {
  PickleBuilder p;
  p.proto(2).global("__torch__", "Net").empty_tuple().newobj().empty_dict().mark();
  p.str("training").boolean(false);
  p.str("squash").boolean(true);
  p.str("mode").integer(2);
  p.str("pool").str("last");
  p.str("head").global("__torch__", "Head").empty_tuple().newobj();
  if (dict_state) {
    p.empty_dict().mark();
    p.str(named ? "weight" : "w");
    test::emit_tensor(p, ts("0", 2, {1, 2}));
    p.str(named ? "bias" : "b");
    test::emit_tensor(p, ts("1", 1, {1}));
    p.setitems();
  } else {
    p.mark();
    test::emit_tensor(p, ts("0", 2, {1, 2}));
    test::emit_tensor(p, ts("1", 1, {1}));
    p.boolean(false).tuple();
  }
  p.build();
  p.setitems().build().stop();
  return p.bytes;
}

Bytes setstate_archive(const std::string& setstate_body, bool dict_state = false, bool getstate = true) {
  const std::string code =
      "class Net(Module):\n"
      "  __parameters__ = []\n"
      "  __buffers__ = []\n"
      "  training : bool\n"
      "  head : __torch__.Head\n"
      "  def forward(self: __torch__.Net,\n"
      "    x: Tensor) -> Tensor:\n"
      "    head = self.head\n"
      "    return (head).forward(x, )\n"
      "class Head(Module):\n"
      "  __parameters__ = [\"weight\", \"bias\", ]\n"
      "  __buffers__ = []\n"
      "  weight : Tensor\n"
      "  bias : Tensor\n"
      "  training : bool\n"
      "  def forward(self: __torch__.Head,\n"
      "    x: Tensor) -> Tensor:\n"
      "    return torch.linear(x, self.weight, self.bias)\n" +
      std::string(getstate ? "  def __getstate__(self: __torch__.Head) -> Tuple[Tensor, Tensor, bool]:\n"
                             "    weight = self.weight\n"
                             "    return (weight, self.bias, self.training)\n"
                           : "") +
      "  def __setstate__(self: __torch__.Head,\n"
      "    state: Tuple[Tensor, Tensor, bool]) -> NoneType:\n" +
      setstate_body + "    return None\n";
  return test::torchscript_zip(setstate_data_pkl(dict_state, !getstate), {{"0", f32({1, 2})}, {"1", f32({3})}},
                               {{"__torch__.py", code}});
}

TEST(TorchScript, SetstateThatRestoresTheStoredStateIsFollowed) {
  // As torch.jit.script prints `self.weight = state[0]` ...
  Loaded l = load(setstate_archive("    self.weight = (state)[0]\n    self.bias = (state)[1]\n"
                                   "    self.training = (state)[2]\n"));
  ASSERT_EQ(names_of(l.ck), (std::vector<std::string>{"head.weight", "head.bias"}));
  EXPECT_EQ(to_float32(l.ck.tensors[0]), (std::vector<float>{1, 2}));
  EXPECT_EQ(to_float32(l.ck.tensors[1]), (std::vector<float>{3}));
  ASSERT_EQ(l.ck.module_objects.size(), 2u);
  EXPECT_EQ(l.ck.module_objects[1].path, "head");
  EXPECT_EQ(l.ck.module_objects[1].scalars.at("training"), "False");
  // Plain scalar attributes, which a forward may branch on.
  const auto& root = l.ck.module_objects[0].scalars;
  EXPECT_EQ(root.at("squash"), "True");
  EXPECT_EQ(root.at("mode"), "2");
  EXPECT_EQ(root.at("pool"), "'last'");
  EXPECT_TRUE(l.ck.ignored.empty());

  // ... and a dict state read by key.
  l = load(setstate_archive("    self.weight = state[\"w\"]\n    self.bias = (state)[\"b\"]\n", true));
  ASSERT_EQ(names_of(l.ck), (std::vector<std::string>{"head.weight", "head.bias"}));
  EXPECT_EQ(to_float32(l.ck.tensors[1]), (std::vector<float>{3}));
}

TEST(TorchScript, SetstateThatComputesIsRefusedNamingTheModule) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"    self.weight = torch.mul((state)[0], 2.)\n    self.bias = (state)[1]\n",
       "line 'self.weight = torch.mul((state)[0], 2.)') computes the value of 'weight'"},
      {"    self.weight = (state)[1]\n    self.weight = (state)[0]\n", "assigns 'weight' twice"},
      {"    self.weight = (state)[5]\n", "reads a part the stored state (tuple) does not have"},
      {"    self.weight = (state)[\"w\"]\n", "reads a part the stored state (tuple) does not have"},
      {"    w = (state)[0]\n    self.weight = w\n", "does more than assign the stored values to attributes"},
      {"    if torch.eq(1, 1):\n      self.weight = (state)[0]\n", "does more than assign"},
      {"    self.weight = (state)[-1]\n", "computes the value of 'weight'"},
  };
  for (const auto& [body, why] : cases) {
    const std::string e = load_error(setstate_archive(body));
    EXPECT_TRUE(contains(e, "module 'head' (class __torch__.Head): its __setstate__ (record 'code/__torch__.py'"))
        << e;
    EXPECT_TRUE(contains(e, why)) << why << ": " << e;
    EXPECT_TRUE(contains(e, "torch.jit.load runs it on the stored state")) << e;
  }
}

TEST(TorchScript, SetstateWithoutGetstateIsNotCalled) {
  // torch.jit.load sets the attributes itself unless both are defined, so
  // the stored dict is what torch uses (checked on torch 1.13): read as is.
  Loaded l = load(setstate_archive("    self.weight = torch.mul(state[\"w\"], 2.)\n", true, false));
  ASSERT_EQ(names_of(l.ck), (std::vector<std::string>{"head.weight", "head.bias"}));
  EXPECT_EQ(to_float32(l.ck.tensors[0]), (std::vector<float>{1, 2}));
}

TEST(TorchScript, TheFixtureFromTorch) {
  const std::string path = std::string(FERRY_FIXTURES_DIR) + "/models/lstm_torchscript.pt";
  if (!std::ifstream(path).good()) GTEST_SKIP() << "no fixture";
  MappedFile m(path);
  const Checkpoint ck = load_checkpoint(m);
  EXPECT_EQ(ck.form, "TorchScript archive (__torch__.SimpleLSTM)");
  EXPECT_EQ(ck.tensors.size(), 10u);
  EXPECT_EQ(ck.tensors.front().name, "lstm.weight_ih_l0");
  EXPECT_EQ(ck.tensors.back().name, "fc.bias");
  EXPECT_EQ(ck.attributes.at("lstm.batch_first"), "true");
  EXPECT_EQ(ck.attributes.at("lstm.num_layers"), "2");
  EXPECT_TRUE(ck.ignored.empty());  // _flat_weights deduplicated
}

TEST(TorchScript, CorruptionNeverCrashes) {
  test::load_every_corruption(net_archive_with_constants(), 2, {0x5A});
}

}  // namespace
}  // namespace ferry::conv

#endif  // FERRY_HAVE_CONVERTER
