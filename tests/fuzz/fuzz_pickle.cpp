// Fuzz target: the restricted unpickler (converter/src/pickle.*) on arbitrary
// bytes, with a persistent loader that accepts ('storage', ...) ids the way
// the checkpoint reader does (so tensor rebuilds are reached), then a bounded
// walk over the resulting tree (which may share nodes and hold cycles); then
// once more with call placeholders on, and their places checked.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "error.h"
#include "fuzz_support.h"
#include "checkpoint/pickle.h"
#include "checkpoint/reader_internal.h"

namespace {

using namespace ferry::conv;

class FakeStorages : public PersistentLoader {
 public:
  Value* load(const Value& pid, ValueArena& arena) override {
    if (pid.kind != Kind::Tuple || pid.items.empty() || pid.items[0]->kind != Kind::String ||
        pid.items[0]->bytes != "storage")
      throw Error("persistent id is not a storage");
    Value* v = arena.make(Kind::Storage);
    v->storage = storage_;
    v->persistent_id = &pid;
    return v;
  }

 private:
  std::shared_ptr<const Storage> storage_ = [] {
    static const uint8_t bytes[64] = {};
    auto s = std::make_shared<Storage>();
    s->key = "0";
    s->location = "cpu";
    s->dtype = DType::F32;
    s->numel = 16;
    s->data = bytes;
    s->nbytes = sizeof bytes;
    return s;
  }();
};

// Touches every reachable value once (iteratively: trees can be 1000 deep).
size_t walk(const Value* root) {
  std::vector<const Value*> todo{root};
  std::unordered_set<const Value*> seen;
  size_t n = 0;
  while (!todo.empty()) {
    const Value* v = todo.back();
    todo.pop_back();
    if (!v || !seen.insert(v).second) continue;
    n += v->qualified_name().size() + v->bytes.size();
    for (const Value* item : v->items) todo.push_back(item);
    for (const auto& [k, val] : v->entries) {
      todo.push_back(k);
      todo.push_back(val);
    }
    todo.push_back(v->cls);
    todo.push_back(v->args);
    todo.push_back(v->state);
    todo.push_back(v->persistent_id);
    if (v->tensor) todo.push_back(v->tensor->storage);
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FakeStorages loader;
  try {
    const PickleTree tree = unpickle(data, size, "fuzz.pkl", &loader);
    if (tree.end > size) ferry::fuzz::invariant_failed("STOP offset past the input");
    (void)walk(tree.root);
  } catch (const Error&) {
  }
  // Again as torch.save main pickles are read: calls of class references
  // kept as placeholders, then their places checked (shared and cyclic
  // trees included).
  try {
    UnpickleLimits limits;
    limits.call_placeholders = true;
    const PickleTree tree = unpickle(data, size, "fuzz.pkl", &loader, limits);
    (void)walk(tree.root);
    detail::check_call_placeholders(tree.root, "fuzz.pkl");
  } catch (const Error&) {
  }
  return 0;
}
