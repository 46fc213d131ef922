// Restricted unpickler (converter/src/pickle.h) on hand-assembled pickles
// and on a few byte strings produced by CPython's pickle.dumps.
// The converter is optional (FERRY_CONVERTER); these tests need it.
#ifdef FERRY_HAVE_CONVERTER

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "error.h"
#include "checkpoint/pickle.h"
#include "pt_builder.h"

namespace ferry::conv {
namespace {

using test::Bytes;
using test::PickleBuilder;

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

PickleTree load(const Bytes& b, PersistentLoader* loader = nullptr, const UnpickleLimits& limits = {}) {
  return unpickle(b.data(), b.size(), "test.pkl", loader, limits);
}

std::string load_error(const Bytes& b, PersistentLoader* loader = nullptr, const UnpickleLimits& limits = {}) {
  return error_of([&] { load(b, loader, limits); });
}

Bytes hex(const std::string& h) {
  Bytes out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(uint8_t(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Returns ('storage-stub', <pid>) as a Storage value without real bytes.
class StubLoader : public PersistentLoader {
 public:
  int calls = 0;
  Value* load(const Value& pid, ValueArena& arena) override {
    ++calls;
    if (pid.kind != Kind::Tuple || pid.items.empty() || pid.items[0]->bytes != "storage")
      throw Error("bad persistent id");
    Value* v = arena.make(Kind::Storage);
    v->persistent_id = &pid;
    return v;
  }
};

TEST(Pickle, Scalars) {
  PickleBuilder p;
  p.proto(2).mark();
  p.none().boolean(true).boolean(false);
  p.integer(5).integer(0x1234).integer(-2).integer(100000).integer(int64_t{1} << 40);
  p.binfloat(1.5).binfloat(-0.0);
  p.tuple().stop();
  PickleTree t = load(p.bytes);
  const Value& r = *t.root;
  ASSERT_EQ(r.kind, Kind::Tuple);
  ASSERT_EQ(r.items.size(), 10u);
  EXPECT_EQ(r.items[0]->kind, Kind::None);
  EXPECT_TRUE(r.items[1]->boolean);
  EXPECT_EQ(r.items[2]->kind, Kind::Bool);
  EXPECT_FALSE(r.items[2]->boolean);
  EXPECT_EQ(r.items[3]->integer, 5);
  EXPECT_EQ(r.items[4]->integer, 0x1234);
  EXPECT_EQ(r.items[5]->integer, -2);
  EXPECT_EQ(r.items[6]->integer, 100000);
  EXPECT_EQ(r.items[7]->integer, int64_t{1} << 40);
  EXPECT_EQ(r.items[8]->real, 1.5);
  EXPECT_TRUE(std::signbit(r.items[9]->real));
  EXPECT_EQ(t.end, p.bytes.size());
}

TEST(Pickle, BinFloatIsBigEndian) {
  // G 3f f8 00 00 00 00 00 00 = 1.5; little-endian reading would be garbage.
  PickleTree t = load(hex("8002473ff80000000000002e"));
  EXPECT_EQ(t.root->real, 1.5);
  PickleTree pi = load(hex("800247400921fb54442d182e"));
  EXPECT_DOUBLE_EQ(pi.root->real, 3.141592653589793);
}

TEST(Pickle, Long1AndLong4) {
  struct Case { const char* hex; int64_t value; };
  for (const Case& c : {Case{"8a00", 0}, Case{"8a01ff", -1}, Case{"8a0100", 0}, Case{"8a0180", -128},
                        Case{"8a020080", -32768}, Case{"8a02ff00", 255}, Case{"8a0800000000000000 80", INT64_MIN},
                        Case{"8a09ffffffffffffffffff", -1}, Case{"8a09ffffffffffffff7f00", INT64_MAX},
                        Case{"8b02000000feff", -2}}) {
    std::string h = c.hex;
    h.erase(std::remove(h.begin(), h.end(), ' '), h.end());
    PickleTree t = load(hex("8002" + h + "2e"));
    ASSERT_EQ(t.root->kind, Kind::Int) << c.hex;
    EXPECT_EQ(t.root->integer, c.value) << c.hex;
  }
  // Values beyond int64 keep their bytes: the legacy format's magic number.
  PickleTree magic = load(hex("80028a0a6cfc9c46f9206aa850192e"));
  ASSERT_EQ(magic.root->kind, Kind::BigInt);
  EXPECT_EQ(magic.root->bytes.size(), 10u);
  PickleTree big = load(hex("80028a09000000000000008000" "2e"));  // 2^63
  EXPECT_EQ(big.root->kind, Kind::BigInt);
  PickleTree p = load(PickleBuilder().proto().long1(-300).stop().bytes);
  EXPECT_EQ(p.root->integer, -300);
}

TEST(Pickle, StringsAndBytes) {
  PickleBuilder p;
  p.proto(4).mark();
  p.str("héllo").short_str("ab");
  p.op(0x8d);  // BINUNICODE8
  test::put64(p.bytes, 2);
  p.raw("cd");
  p.op('U').op(3).raw("xyz");                 // SHORT_BINSTRING (Python 2 str)
  p.op('T');                                   // BINSTRING, not UTF-8 -> bytes
  test::put32(p.bytes, 2);
  p.raw({0xff, 0xfe});
  p.short_bytes("\x01\x02");
  p.op('B');
  test::put32(p.bytes, 1);
  p.raw("z");
  p.op(0x8e);  // BINBYTES8
  test::put64(p.bytes, 0);
  p.op(0x96);  // BYTEARRAY8
  test::put64(p.bytes, 1);
  p.raw("q");
  p.tuple().stop();
  PickleTree t = load(p.bytes);
  const auto& it = t.root->items;
  ASSERT_EQ(it.size(), 9u);
  EXPECT_EQ(it[0]->kind, Kind::String);
  EXPECT_EQ(it[0]->bytes, "héllo");
  EXPECT_EQ(it[1]->bytes, "ab");
  EXPECT_EQ(it[2]->bytes, "cd");
  EXPECT_EQ(it[3]->kind, Kind::String);
  EXPECT_EQ(it[3]->bytes, "xyz");
  EXPECT_EQ(it[4]->kind, Kind::Bytes);
  EXPECT_EQ(it[5]->kind, Kind::Bytes);
  EXPECT_EQ(it[5]->bytes, std::string("\x01\x02"));
  EXPECT_EQ(it[6]->bytes, "z");
  EXPECT_EQ(it[7]->bytes, "");
  EXPECT_EQ(it[8]->bytes, "q");
}

TEST(Pickle, InvalidUtf8IsRefused) {
  PickleBuilder p;
  p.proto().op('X');
  test::put32(p.bytes, 2);
  p.raw({0xc3, 0x28}).stop();
  EXPECT_TRUE(contains(load_error(p.bytes), "UTF-8"));
}

TEST(Pickle, Containers) {
  PickleBuilder p;
  p.proto(4).mark();
  p.empty_list().integer(1).append_().mark().integer(2).integer(3).appends();   // [1,2,3]
  p.mark().integer(4).op('l');                                                   // LIST [4]
  p.mark().str("k").integer(1).op('d');                                          // DICT {'k':1}
  p.empty_dict().str("a").integer(1).setitem().mark().str("b").integer(2).str("a").integer(3).setitems();
  p.integer(7).tuple_n(1).integer(7).integer(8).tuple_n(2).integer(7).integer(8).integer(9).tuple_n(3);
  p.op(0x8f).mark().integer(1).integer(2).op(0x90);                             // EMPTY_SET ADDITEMS
  p.mark().integer(5).op(0x91);                                                  // FROZENSET
  p.empty_tuple();
  p.tuple().stop();
  PickleTree t = load(p.bytes);
  const auto& it = t.root->items;
  ASSERT_EQ(it.size(), 10u);
  ASSERT_EQ(it[0]->kind, Kind::List);
  ASSERT_EQ(it[0]->items.size(), 3u);
  EXPECT_EQ(it[0]->items[2]->integer, 3);
  EXPECT_EQ(it[1]->items[0]->integer, 4);
  EXPECT_EQ(it[2]->get("k")->integer, 1);
  // A repeated key replaces the value and keeps its first position.
  ASSERT_EQ(it[3]->entries.size(), 2u);
  EXPECT_EQ(it[3]->entries[0].first->bytes, "a");
  EXPECT_EQ(it[3]->entries[0].second->integer, 3);
  EXPECT_EQ(it[3]->get("b")->integer, 2);
  EXPECT_EQ(it[4]->items.size(), 1u);
  EXPECT_EQ(it[5]->items.size(), 2u);
  EXPECT_EQ(it[6]->items.size(), 3u);
  EXPECT_EQ(it[7]->kind, Kind::Set);
  EXPECT_EQ(it[7]->items.size(), 2u);
  EXPECT_EQ(it[8]->kind, Kind::Set);
  EXPECT_EQ(it[9]->kind, Kind::Tuple);
  EXPECT_TRUE(it[9]->items.empty());
}

TEST(Pickle, MemoSharesObjects) {
  // An empty list is memoized, fetched again, and filled afterwards: both
  // references see the items (the OrderedDict-then-SETITEMS pattern).
  PickleBuilder p;
  p.proto().mark();
  p.empty_list().binput(0);
  p.binget(0).integer(1).append_();
  p.empty_dict().long_binput(70000).long_binget(70000).str("x").integer(2).setitem();
  p.tuple().stop();
  PickleTree t = load(p.bytes);
  const auto& it = t.root->items;
  ASSERT_EQ(it.size(), 4u);
  EXPECT_EQ(it[0], it[1]);
  EXPECT_EQ(it[0]->items.size(), 1u);
  EXPECT_EQ(it[2], it[3]);
  EXPECT_EQ(it[2]->get("x")->integer, 2);
}

TEST(Pickle, StackOperations) {
  PickleBuilder p;
  p.proto().mark().integer(1).op('2').integer(9).op('0');  // DUP, POP
  p.mark().integer(5).integer(6).op('1');                   // POP_MARK discards
  p.mark().op('0');                                          // POP of an empty frame drops the mark
  p.tuple().stop();
  PickleTree t = load(p.bytes);
  ASSERT_EQ(t.root->items.size(), 2u);
  EXPECT_EQ(t.root->items[0]->integer, 1);
  EXPECT_EQ(t.root->items[1]->integer, 1);
}

TEST(Pickle, PythonProtocol2OrderedDict) {
  // pickle.dumps(OrderedDict([('a', 1)]), protocol=2)
  PickleTree t = load(hex("800263636f6c6c656374696f6e730a4f726465726564446963740a7100295271015801000000"
                          "6171024b01732e"));
  ASSERT_EQ(t.root->kind, Kind::Dict);
  ASSERT_EQ(t.root->entries.size(), 1u);
  EXPECT_EQ(t.root->get("a")->integer, 1);
}

TEST(Pickle, PythonProtocol4FrameMemoizeStackGlobal) {
  // pickle.dumps([OrderedDict([('a', 1)]), 'xy', -1, 2**70, 1.5], protocol=4)
  PickleTree t = load(hex("8004954b000000000000005d94288c0b636f6c6c656374696f6e73948c0b4f7264657265644469"
                          "63749493942952948c0161944b01738c027879944affffffff8a09000000000000000040473ff8"
                          "000000000000652e"));
  ASSERT_EQ(t.root->kind, Kind::List);
  const auto& it = t.root->items;
  ASSERT_EQ(it.size(), 5u);
  EXPECT_EQ(it[0]->kind, Kind::Dict);
  EXPECT_EQ(it[0]->get("a")->integer, 1);
  EXPECT_EQ(it[1]->bytes, "xy");
  EXPECT_EQ(it[2]->integer, -1);
  EXPECT_EQ(it[3]->kind, Kind::BigInt);
  EXPECT_EQ(it[4]->real, 1.5);
}

TEST(Pickle, FrameLongerThanInputIsRefused) {
  PickleBuilder p;
  p.proto(4).frame(1000).none().stop();
  EXPECT_TRUE(contains(load_error(p.bytes), "frame"));
}

TEST(Pickle, GlobalsAreClassifiedNotImported) {
  PickleBuilder p;
  p.proto().mark();
  p.global("torch._utils", "_rebuild_tensor_v2").global("torch", "FloatStorage").global("torch", "bfloat16");
  p.global("torch.storage", "UntypedStorage").global("__main__", "Net").global("collections", "OrderedDict");
  p.tuple().stop();
  PickleTree t = load(p.bytes);
  const auto& it = t.root->items;
  EXPECT_EQ(it[0]->global_kind, GlobalKind::RebuildTensorV2);
  EXPECT_EQ(it[1]->global_kind, GlobalKind::StorageClass);
  EXPECT_EQ(it[2]->global_kind, GlobalKind::DTypeObject);
  EXPECT_EQ(it[3]->global_kind, GlobalKind::UntypedStorage);
  EXPECT_EQ(it[4]->global_kind, GlobalKind::Class);
  EXPECT_EQ(it[4]->qualified_name(), "__main__.Net");
  EXPECT_EQ(it[5]->global_kind, GlobalKind::OrderedDict);
}

TEST(Pickle, ReduceOfPosixSystemIsRefusedNamingIt) {
  PickleBuilder p;
  p.proto().global("posix", "system").str("touch /tmp/pwned").tuple_n(1).reduce().stop();
  const std::string msg = load_error(p.bytes);
  EXPECT_TRUE(contains(msg, "posix.system")) << msg;
  EXPECT_TRUE(contains(msg, "byte 2")) << msg;
  EXPECT_TRUE(contains(msg, "test.pkl")) << msg;
}

TEST(Pickle, DangerousGlobalsAreRefused) {
  for (auto [module, name] : std::vector<std::pair<std::string, std::string>>{
           {"os", "system"}, {"nt", "system"}, {"posix", "popen"}, {"subprocess", "Popen"},
           {"sys", "exit"}, {"sys", "modules"}, {"builtins", "eval"}, {"builtins", "exec"},
           {"__builtin__", "eval"}, {"builtins", "__import__"}, {"builtins", "getattr"}, {"os.path", "join"}}) {
    PickleBuilder p;
    p.proto().global(module, name).stop();
    const std::string msg = load_error(p.bytes);
    EXPECT_TRUE(contains(msg, "refused global '" + module + "." + name + "'")) << msg;
    // The same through STACK_GLOBAL.
    PickleBuilder q;
    q.proto(4).short_str(module).short_str(name).stack_global().stop();
    EXPECT_TRUE(contains(load_error(q.bytes), module + "." + name));
  }
}

TEST(Pickle, ReduceOfUnknownCallableIsRefused) {
  PickleBuilder p;
  p.proto().global("__main__", "Net").empty_tuple().op('R').stop();
  const std::string msg = load_error(p.bytes);
  EXPECT_TRUE(contains(msg, "refused REDUCE of '__main__.Net'")) << msg;
  EXPECT_TRUE(contains(msg, "at byte 17")) << msg;  // PROTO(2) + GLOBAL(1 + 9 + 4) + EMPTY_TUPLE(1)
  // torch itself is no wildcard.
  PickleBuilder q;
  q.proto().global("torch", "load").str("x.pt").tuple_n(1).reduce().stop();
  EXPECT_TRUE(contains(load_error(q.bytes), "torch.load"));
  // Nor are dtype objects or storage classes callables.
  PickleBuilder d;
  d.proto().global("torch", "float32").empty_tuple().reduce().stop();
  EXPECT_TRUE(contains(load_error(d.bytes), "torch.float32"));
}

// UnpickleLimits::call_placeholders: REDUCE of an inert class reference
// becomes a placeholder recording the callable and the byte, never called;
// refused globals, dtypes and storage classes stay refused.
TEST(Pickle, CallPlaceholdersWhenAsked) {
  UnpickleLimits limits;
  limits.call_placeholders = true;
  PickleBuilder p;
  p.proto().global("torch.nn.backends.thnn", "_get_thnn_function_backend").empty_tuple().reduce().stop();
  PickleTree t = load(p.bytes, nullptr, limits);
  ASSERT_EQ(t.root->kind, Kind::Placeholder);
  EXPECT_EQ(t.root->qualified_name(), "torch.nn.backends.thnn._get_thnn_function_backend");
  EXPECT_EQ(t.root->integer, 54);  // PROTO(2) + GLOBAL(1 + 23 + 27) + EMPTY_TUPLE(1)
  EXPECT_TRUE(contains(load_error(p.bytes), "refused REDUCE of 'torch.nn.backends.thnn._get_thnn_function_backend'"));
  // REDUCE then BUILD (functools.partial's reduction) keeps the state, inert.
  PickleBuilder b;
  b.proto().global("functools", "partial").global("__main__", "f").tuple_n(1).reduce();
  b.mark().global("__main__", "f").empty_tuple().empty_dict().none().tuple().build().stop();
  t = load(b.bytes, nullptr, limits);
  ASSERT_EQ(t.root->kind, Kind::Placeholder);
  ASSERT_NE(t.root->state, nullptr);
  EXPECT_EQ(t.root->state->kind, Kind::Tuple);
  // Never for a refused global, a dtype, a storage class, or a placeholder.
  PickleBuilder sys;
  sys.proto().global("posix", "system").str("touch /tmp/ferry_pwned").tuple_n(1).reduce().stop();
  EXPECT_TRUE(contains(load_error(sys.bytes, nullptr, limits), "refused global 'posix.system'"));
  PickleBuilder d;
  d.proto().global("torch", "float32").empty_tuple().reduce().stop();
  EXPECT_TRUE(contains(load_error(d.bytes, nullptr, limits), "refused REDUCE of 'torch.float32'"));
  PickleBuilder s;
  s.proto().global("torch", "FloatStorage").empty_tuple().reduce().stop();
  EXPECT_TRUE(contains(load_error(s.bytes, nullptr, limits), "refused REDUCE of 'torch.FloatStorage'"));
  PickleBuilder twice;
  twice.proto().global("__main__", "f").empty_tuple().reduce().empty_tuple().reduce().stop();
  EXPECT_TRUE(contains(load_error(twice.bytes, nullptr, limits), "REDUCE of a call never made, not a global"));
}

TEST(Pickle, NewObjAndBuildMakeInertObjects) {
  PickleBuilder p;
  p.proto().global("__main__", "Net").put().empty_tuple().newobj().put();
  p.empty_dict().str("training").boolean(true).setitem().build().stop();
  PickleTree t = load(p.bytes);
  ASSERT_EQ(t.root->kind, Kind::Object);
  EXPECT_EQ(t.root->qualified_name(), "__main__.Net");
  ASSERT_NE(t.root->state, nullptr);
  EXPECT_TRUE(t.root->state->get("training")->boolean);
}

TEST(Pickle, BuildOnPlainValuesIsRefused) {
  PickleBuilder p;
  p.proto().empty_list().empty_dict().build().stop();
  EXPECT_TRUE(contains(load_error(p.bytes), "BUILD on a list"));
}

TEST(Pickle, AllowlistedReductions) {
  PickleBuilder p;
  p.proto().mark();
  // OrderedDict([('a', 1)])
  p.global("collections", "OrderedDict").mark().str("a").integer(1).tuple_n(2).op('l').tuple_n(1).reduce();
  // _codecs.encode('\u00e9\x01', 'latin1') -> b'\xe9\x01'
  p.global("_codecs", "encode").str("\xc3\xa9\x01").str("latin1").tuple_n(2).reduce();
  // torch.Size((2, 3))
  p.global("torch", "Size").integer(2).integer(3).tuple_n(2).tuple_n(1).reduce();
  // set([1, 2]) under the Python 2 name
  p.global("__builtin__", "set").mark().integer(1).integer(2).op('l').tuple_n(1).reduce();
  // torch.device('cuda', 0) stays a recorded call
  p.global("torch", "device").str("cuda").integer(0).tuple_n(2).reduce();
  p.tuple().stop();
  PickleTree t = load(p.bytes);
  const auto& it = t.root->items;
  ASSERT_EQ(it.size(), 5u);
  EXPECT_EQ(it[0]->kind, Kind::Dict);
  EXPECT_EQ(it[0]->get("a")->integer, 1);
  EXPECT_EQ(it[1]->kind, Kind::Bytes);
  EXPECT_EQ(it[1]->bytes, std::string("\xe9\x01"));
  ASSERT_EQ(it[2]->kind, Kind::Tuple);
  EXPECT_EQ(it[2]->items[1]->integer, 3);
  EXPECT_EQ(it[3]->kind, Kind::Set);
  EXPECT_EQ(it[4]->kind, Kind::Call);
  EXPECT_EQ(it[4]->qualified_name(), "torch.device");
}

TEST(Pickle, RebuildTensorWithPersistentStorage) {
  test::TensorSpec s;
  s.name = "w";
  s.key = "0";
  s.storage_numel = 10;
  s.offset = 2;
  s.size = {3, 2};
  s.stride = {1, 3};
  PickleBuilder p;
  p.proto();
  test::emit_tensor(p, s);
  p.stop();
  StubLoader loader;
  PickleTree t = load(p.bytes, &loader);
  EXPECT_EQ(loader.calls, 1);
  ASSERT_EQ(t.root->kind, Kind::Tensor);
  const TensorInfo& info = *t.root->tensor;
  EXPECT_EQ(info.offset, 2);
  EXPECT_EQ(info.size, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(info.stride, (std::vector<int64_t>{1, 3}));
  ASSERT_EQ(info.storage->kind, Kind::Storage);
  const Value& pid = *info.storage->persistent_id;
  EXPECT_EQ(pid.items[2]->bytes, "0");
  EXPECT_EQ(pid.items[3]->bytes, "cuda:0");
  EXPECT_EQ(pid.items[1]->qualified_name(), "torch.FloatStorage");
  EXPECT_EQ(info.dtype, nullptr);

  // Without a loader, persistent ids are refused.
  EXPECT_TRUE(contains(load_error(p.bytes), "persistent"));
}

TEST(Pickle, RebuildTensorV3AndParameter) {
  test::TensorSpec s;
  s.storage_class = "UntypedStorage";
  s.key = "3";
  s.storage_numel = 8;
  s.size = {4};
  s.v3_dtype = "float16";
  s.parameter = true;
  PickleBuilder p;
  p.proto();
  test::emit_tensor(p, s);
  p.stop();
  StubLoader loader;
  PickleTree t = load(p.bytes, &loader);
  ASSERT_EQ(t.root->kind, Kind::Tensor);
  ASSERT_NE(t.root->tensor->dtype, nullptr);
  EXPECT_EQ(t.root->tensor->dtype->name, "float16");
  EXPECT_TRUE(t.root->tensor->requires_grad);  // from _rebuild_parameter
}

TEST(Pickle, RebuildFromTypeV2AppliesTheInnerRebuild) {
  PickleBuilder p;
  p.proto().global("torch._tensor", "_rebuild_from_type_v2");
  p.mark().global("torch._utils", "_rebuild_tensor_v2");
  p.global("torch.nn.parameter", "Parameter");
  // args of the inner call
  p.mark().mark().str("storage").global("torch", "FloatStorage").str("0").str("cpu").integer(4).tuple().binpersid();
  p.integer(0).integer(4).tuple_n(1).integer(1).tuple_n(1).boolean(false);
  p.global("collections", "OrderedDict").empty_tuple().reduce().tuple();
  p.empty_dict();  // state
  p.tuple().reduce().stop();
  StubLoader loader;
  PickleTree t = load(p.bytes, &loader);
  ASSERT_EQ(t.root->kind, Kind::Tensor);
  EXPECT_EQ(t.root->tensor->size, (std::vector<int64_t>{4}));
}

TEST(Pickle, OldStyleParameterReduceReturnsItsTensor) {
  // PyTorch 0.4: Parameter.__reduce_ex__ -> (Parameter, (tensor, requires_grad)).
  PickleBuilder p;
  p.proto().global("torch.nn.parameter", "Parameter").global("torch._utils", "_rebuild_tensor_v2").mark();
  p.mark().str("storage").global("torch", "FloatStorage").str("0").str("cpu").integer(2).tuple().binpersid();
  p.integer(0).integer(2).tuple_n(1).integer(1).tuple_n(1).boolean(false);
  p.global("collections", "OrderedDict").empty_tuple().reduce().tuple().reduce();
  p.boolean(true).tuple_n(2).reduce().stop();
  StubLoader loader;
  PickleTree t = load(p.bytes, &loader);
  ASSERT_EQ(t.root->kind, Kind::Tensor);
  EXPECT_TRUE(t.root->tensor->requires_grad);
  // Of anything but a tensor, and torch.Tensor(...) itself, it is refused.
  PickleBuilder q;
  q.proto().global("torch.nn.parameter", "Parameter").str("x").tuple_n(1).reduce().stop();
  EXPECT_NE(load_error(q.bytes).find("Parameter of a str, not a tensor"), std::string::npos) << load_error(q.bytes);
  PickleBuilder r;
  r.proto().global("torch", "Tensor").empty_tuple().reduce().stop();
  EXPECT_NE(load_error(r.bytes).find("refused REDUCE of 'torch.Tensor'"), std::string::npos);
}

TEST(Pickle, MalformedTensorArgumentsAreRefused) {
  auto tensor_with = [](std::vector<int64_t> size, std::vector<int64_t> stride, int64_t offset) {
    PickleBuilder p;
    p.proto().global("torch._utils", "_rebuild_tensor_v2").mark();
    p.mark().str("storage").global("torch", "FloatStorage").str("0").str("cpu").integer(4).tuple().binpersid();
    p.integer(offset).mark();
    for (int64_t d : size) p.integer(d);
    p.tuple().mark();
    for (int64_t d : stride) p.integer(d);
    p.tuple().boolean(false).global("collections", "OrderedDict").empty_tuple().reduce().tuple().reduce().stop();
    return p.bytes;
  };
  StubLoader loader;
  EXPECT_TRUE(contains(load_error(tensor_with({-1}, {1}, 0), &loader), "negative tensor size"));
  EXPECT_TRUE(contains(load_error(tensor_with({2}, {-1}, 0), &loader), "negative tensor stride"));
  EXPECT_TRUE(contains(load_error(tensor_with({2}, {1}, -3), &loader), "negative tensor storage offset"));
  EXPECT_TRUE(contains(load_error(tensor_with({2, 2}, {1}, 0), &loader), "dimensions"));
  EXPECT_EQ(load_error(tensor_with({2, 2}, {2, 1}, 0), &loader), "");
}

TEST(Pickle, StackUnderflow) {
  const std::string msg = load_error(PickleBuilder().proto().tuple_n(1).stop().bytes);
  EXPECT_TRUE(contains(msg, "stack underflow")) << msg;
  EXPECT_TRUE(contains(msg, "byte 2")) << msg;
  // Items below a MARK are out of reach until the mark is closed.
  EXPECT_TRUE(contains(load_error(PickleBuilder().proto().none().mark().tuple_n(1).stop().bytes), "underflow"));
  EXPECT_TRUE(contains(load_error(PickleBuilder().proto().stop().bytes), "underflow"));
}

TEST(Pickle, MarkUnderflow) {
  const std::string msg = load_error(PickleBuilder().proto().none().tuple().stop().bytes);
  EXPECT_TRUE(contains(msg, "MARK underflow")) << msg;
  EXPECT_TRUE(contains(msg, "TUPLE")) << msg;
}

TEST(Pickle, BadMemoIndex) {
  const std::string msg = load_error(PickleBuilder().proto().none().binput(1).binget(2).stop().bytes);
  EXPECT_TRUE(contains(msg, "memo index 2")) << msg;
  EXPECT_TRUE(contains(load_error(PickleBuilder().proto().long_binget(0xFFFFFFFF).stop().bytes), "memo"));
  EXPECT_TRUE(contains(load_error(PickleBuilder().proto().binput(0).stop().bytes), "underflow"));
}

TEST(Pickle, UnknownOpcode) {
  const std::string msg = load_error(PickleBuilder().proto().none().op(0xff).stop().bytes);
  EXPECT_TRUE(contains(msg, "unknown opcode 0xff")) << msg;
  EXPECT_TRUE(contains(msg, "byte 3")) << msg;
  EXPECT_TRUE(contains(load_error(PickleBuilder().proto().op('I').raw("1\n").stop().bytes), "not supported"));
  EXPECT_TRUE(contains(load_error(PickleBuilder().proto().op(0x97).stop().bytes), "buffer"));
  EXPECT_TRUE(contains(load_error(PickleBuilder().proto(6).none().stop().bytes), "protocol 6"));
}

TEST(Pickle, TruncatedInputs) {
  EXPECT_TRUE(contains(load_error(PickleBuilder().proto().none().bytes), "no STOP"));
  Bytes s = PickleBuilder().proto().bytes;
  s.push_back('X');
  test::put32(s, 0xFFFFFFF0u);  // claims 4 GiB, has 1 byte
  s.push_back('a');
  EXPECT_TRUE(contains(load_error(s), "truncated"));
  EXPECT_TRUE(contains(load_error(PickleBuilder().proto().op('c').raw("torch").bytes), "GLOBAL"));
  EXPECT_TRUE(contains(load_error(PickleBuilder().proto().op('J').raw({1, 2}).bytes), "truncated"));
  // Every prefix of a valid pickle fails cleanly.
  const Bytes full = test::state_dict_pickle({{"w", "FloatStorage", "0", "cpu", 4, 0, {4}, {}, "", false}});
  StubLoader loader;
  for (size_t n = 0; n < full.size(); ++n) {
    Bytes cut(full.begin(), full.begin() + long(n));
    EXPECT_THROW(load(cut, &loader), Error) << n;
  }
  EXPECT_NO_THROW(load(full, &loader));
}

TEST(Pickle, WrongContainerTargets) {
  EXPECT_TRUE(contains(load_error(PickleBuilder().proto().empty_dict().none().append_().stop().bytes), "APPEND to a dict"));
  EXPECT_TRUE(contains(load_error(PickleBuilder().proto().empty_list().none().none().setitem().stop().bytes), "not a dict"));
  EXPECT_TRUE(contains(load_error(PickleBuilder().proto().empty_dict().mark().none().setitems().stop().bytes), "odd"));
}

TEST(Pickle, BackToBackPicklesReportTheirEnd) {
  Bytes two = PickleBuilder().proto().integer(1).stop().bytes;
  const size_t first = two.size();
  test::append(two, PickleBuilder().proto().integer(2).stop().bytes);
  PickleTree a = load(two);
  EXPECT_EQ(a.root->integer, 1);
  EXPECT_EQ(a.end, first);
  PickleTree b = unpickle(two.data() + a.end, two.size() - a.end, "second");
  EXPECT_EQ(b.root->integer, 2);
}

TEST(Pickle, SelfReferenceIsHarmless) {
  // l = []; l.append(l)
  PickleTree t = load(PickleBuilder().proto().empty_list().binput(0).binget(0).append_().stop().bytes);
  ASSERT_EQ(t.root->kind, Kind::List);
  EXPECT_EQ(t.root->items[0], t.root);
}

TEST(Pickle, DeepNestingIsRefusedWithoutRecursion) {
  constexpr size_t kDepth = 200000;
  // ((((None,),),)...) via TUPLE1
  PickleBuilder tuples;
  tuples.proto().none();
  for (size_t i = 0; i < kDepth; ++i) tuples.tuple_n(1);
  tuples.stop();
  EXPECT_TRUE(contains(load_error(tuples.bytes), "nested deeper"));
  // 200k open MARKs
  PickleBuilder marks;
  marks.proto();
  for (size_t i = 0; i < kDepth; ++i) marks.mark();
  marks.stop();
  EXPECT_TRUE(contains(load_error(marks.bytes), "MARK depth"));
  // [[[[...]]]] built with APPEND
  PickleBuilder lists;
  lists.proto();
  for (size_t i = 0; i < kDepth; ++i) lists.empty_list();
  for (size_t i = 1; i < kDepth; ++i) lists.append_();
  lists.stop();
  EXPECT_TRUE(contains(load_error(lists.bytes), "nested deeper"));
}

TEST(Pickle, DeepTreeIsBuiltAndFreedWhenAllowed) {
  // With the nesting cap lifted, a 200k-deep tree is built and destroyed
  // without touching the C stack (the arena frees it flat).
  constexpr size_t kDepth = 200000;
  PickleBuilder tuples;
  tuples.proto().none();
  for (size_t i = 0; i < kDepth; ++i) tuples.tuple_n(1);
  tuples.stop();
  UnpickleLimits limits;
  limits.max_nesting = 1u << 30;
  {
    PickleTree t = load(tuples.bytes, nullptr, limits);
    EXPECT_EQ(t.root->depth, kDepth);
  }
  PickleBuilder lists;
  lists.proto();
  for (size_t i = 0; i < kDepth; ++i) lists.empty_list();
  for (size_t i = 1; i < kDepth; ++i) lists.append_();
  lists.stop();
  PickleTree t = load(lists.bytes, nullptr, limits);
  EXPECT_EQ(t.root->kind, Kind::List);
}

TEST(Pickle, LimitsAreEnforced) {
  UnpickleLimits small;
  small.max_stack = 8;
  PickleBuilder many;
  many.proto();
  for (int i = 0; i < 9; ++i) many.none();
  many.stop();
  EXPECT_TRUE(contains(load_error(many.bytes, nullptr, small), "stack depth"));

  UnpickleLimits memo;
  memo.max_memo = 2;
  EXPECT_TRUE(contains(load_error(PickleBuilder().proto().none().binput(0).binput(1).binput(2).stop().bytes,
                                  nullptr, memo), "memo exceeds"));
  // Re-storing an existing index does not grow the memo.
  EXPECT_EQ(load_error(PickleBuilder().proto().none().binput(0).binput(1).binput(1).stop().bytes, nullptr, memo), "");

  UnpickleLimits values;
  values.max_values = 50;
  PickleBuilder lots;
  lots.proto().empty_list();
  for (int i = 0; i < 100; ++i) lots.integer(i).append_();
  lots.stop();
  EXPECT_TRUE(contains(load_error(lots.bytes, nullptr, values), "values"));

  UnpickleLimits strings;
  strings.max_string = 4;
  EXPECT_TRUE(contains(load_error(PickleBuilder().proto().str("hello").stop().bytes, nullptr, strings), "limit"));
}

TEST(Pickle, SingleByteCorruptionNeverCrashes) {
  const Bytes full = test::state_dict_pickle({{"a", "FloatStorage", "0", "cpu", 4, 0, {2, 2}, {}, "", false},
                                              {"b", "HalfStorage", "1", "cuda:0", 4, 1, {3}, {}, "", true}});
  StubLoader loader;
  for (size_t i = 0; i < full.size(); ++i) {
    for (uint8_t v : {uint8_t(0x00), uint8_t(0xFF), uint8_t(full[i] + 1)}) {
      Bytes bad = full;
      bad[i] = v;
      try {
        load(bad, &loader);
      } catch (const Error&) {
      }
    }
  }
}

}  // namespace
}  // namespace ferry::conv

#endif  // FERRY_HAVE_CONVERTER
