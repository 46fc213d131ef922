// ferry._ferry: the runtime's C API and the converter's calls for Python
// (nanobind). The package's public names are in ferry/__init__.py; this file
// holds Model, Session, the exceptions and the calls ferry/_convert.py makes.
//
// Memory: a Model owns a 64-byte aligned copy of the model bytes and the
// handle; every Session holds a reference to that copy (so the bytes live
// as long as any session) and owns its arena, sized exactly by
// ferry_session_arena_size. Nothing is allocated per call but the output
// array (none with out=).
//
// Threads: the GIL is released while the runtime or the converter computes.
// A session is used by one thread at a time: a second thread calling into a
// busy session gets SessionError at once (never a data race).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <type_traits>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "convert.h"
#include "error.h"
#include "ferry/ferry.h"
#include "ferry/ferry_generated.h"
#include "library.h"
#include "model/model.h"  // the loaded model's layers: the state's parts, as the runtime lays them out

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// ------------------------------------------------------------ exceptions --

// The exception classes (made once at import, ferry/__init__.py re-exports
// them). Each instance carries .status: the C API's status name, or None.
struct Exceptions {
  PyObject* error = nullptr;        // ferry.Error(Exception)
  PyObject* convert = nullptr;      // ferry.ConvertError(Error)
  PyObject* model = nullptr;        // ferry.ModelError(Error, ValueError)
  PyObject* input = nullptr;        // ferry.InputError(Error, ValueError)
  PyObject* session = nullptr;      // ferry.SessionError(Error)
  PyObject* unsupported = nullptr;  // ferry.UnsupportedError(Error)
} g_exc;

PyObject* new_exception(nb::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string qualified = std::string("ferry.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (!type) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

[[noreturn]] void raise(PyObject* type, const std::string& message, const char* status = nullptr) {
  nb::object exc = nb::steal(PyObject_CallOneArg(type, nb::str(message.c_str(), message.size()).ptr()));
  if (!exc.is_valid()) throw nb::python_error();
  exc.attr("status") = status ? nb::object(nb::str(status)) : nb::none();
  PyErr_SetObject(type, exc.ptr());
  throw nb::python_error();
}

// The exception a failing C API call raises: its class by status, its
// message "<what>: <ferry_last_error()>" (read on the calling thread, right
// after the call).
[[noreturn]] void raise_status(ferry_status st, const std::string& what, const std::string& detail) {
  PyObject* type = st == FERRY_INVALID_ARGUMENT ? g_exc.input
                   : st == FERRY_INVALID_MODEL  ? g_exc.model
                   : st == FERRY_UNSUPPORTED    ? g_exc.unsupported
                                                : g_exc.session;
  raise(type, detail.empty() ? what : what + ": " + detail, ferry_status_string(st));
}

void check(ferry_status st, const std::string& what) {
  if (st != FERRY_OK) raise_status(st, what, ferry_last_error());
}

// -------------------------------------------------------------- arrays --

// numpy, imported once and never released (a static nb::object would be
// released after the interpreter is gone, at exit).
nb::handle numpy() {
  static PyObject* np = nb::module_::import_("numpy").release().ptr();
  return np;
}

std::string kind_of(nb::handle x) { return nb::cast<std::string>(nb::type_name(x.type())); }

// A C-contiguous array of 4-byte elements (float32 or int32) read in place
// through the buffer protocol: a few tens of nanoseconds, which is what a
// small step costs in C. It holds the buffer (and a converted copy, where
// one was made) until it goes.
template <typename T>
class View {
 public:
  View() = default;
  View(View&& o) noexcept : v_(o.v_), held_(o.held_), owner_(std::move(o.owner_)) { o.held_ = false; }
  View& operator=(View&& o) noexcept {
    if (this != &o) {
      release();
      v_ = o.v_;
      held_ = o.held_;
      owner_ = std::move(o.owner_);
      o.held_ = false;
    }
    return *this;
  }
  View(const View&) = delete;
  View& operator=(const View&) = delete;
  ~View() { release(); }

  // `o` as it is, when it is a C-contiguous buffer of T (float32: format
  // 'f'; int32: 'i'), writable where asked. False, with no error set,
  // otherwise.
  bool acquire(nb::handle o, bool writable, nb::object owner = nb::object()) {
    release();
    if (!PyObject_CheckBuffer(o.ptr())) return false;
    if (PyObject_GetBuffer(o.ptr(), &v_, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) != 0) {
      PyErr_Clear();
      return false;
    }
    held_ = true;
    const char* f = v_.format ? v_.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') ++f;
    const char want = std::is_same_v<std::remove_const_t<T>, float> ? 'f' : 'i';
    if (v_.itemsize != 4 || f[0] != want || f[1] != '\0') {
      release();
      return false;
    }
    owner_ = std::move(owner);
    return true;
  }

  T* data() const { return static_cast<T*>(v_.buf); }
  size_t ndim() const { return static_cast<size_t>(v_.ndim); }
  size_t shape(size_t i) const { return static_cast<size_t>(v_.shape[i]); }
  size_t size() const { return static_cast<size_t>(v_.len) / 4; }

 private:
  void release() {
    if (held_) PyBuffer_Release(&v_);
    held_ = false;
  }
  Py_buffer v_{};
  bool held_ = false;
  nb::object owner_;
};

using FloatIn = View<const float>;
using IntIn = View<const int32_t>;
using FloatOut = View<float>;

// `x` as a C-contiguous float32 array: as it is when it already is one (no
// copy), else converted once by numpy (float64, a slice, a list).
FloatIn float_array(nb::handle x, const char* what) {
  FloatIn a;
  if (a.acquire(x, false)) return a;
  nb::object converted;
  try {
    converted = numpy().attr("ascontiguousarray")(x, "dtype"_a = "float32");
  } catch (nb::python_error& e) {
    raise(g_exc.input, std::string(what) + ": expected float32 numbers (an array or what numpy converts to one), got " +
                           kind_of(x) + " (" + e.what() + ")");
  }
  if (!a.acquire(converted, false, converted)) raise(g_exc.input, std::string(what) + ": could not be read as float32");
  return a;
}

// `x` as C-contiguous int32 values (token ids, lengths): integers only, each
// within int32 (a float or a wider integer out of range is refused, never
// rounded or wrapped).
IntIn int_array(nb::handle x, const char* what) {
  IntIn a;
  if (a.acquire(x, false)) return a;
  nb::object arr;
  try {
    arr = numpy().attr("asarray")(x);
  } catch (nb::python_error& e) {
    raise(g_exc.input, std::string(what) + ": expected integers, got " + kind_of(x) + " (" + e.what() + ")");
  }
  const std::string kind = nb::cast<std::string>(arr.attr("dtype").attr("kind"));
  if (kind != "i" && kind != "u") {
    raise(g_exc.input, std::string(what) + ": expected integers, got an array of " +
                           nb::cast<std::string>(arr.attr("dtype").attr("name")));
  }
  if (nb::cast<size_t>(arr.attr("size")) > 0) {
    const long long lo = nb::cast<long long>(arr.attr("min")()), hi = nb::cast<long long>(arr.attr("max")());
    if (lo < INT32_MIN || hi > INT32_MAX)
      raise(g_exc.input, std::string(what) + ": " + std::to_string(lo < INT32_MIN ? lo : hi) + " is outside int32");
  }
  nb::object converted = numpy().attr("ascontiguousarray")(arr, "dtype"_a = "int32");
  if (!a.acquire(converted, false, converted)) raise(g_exc.input, std::string(what) + ": could not be read as int32");
  return a;
}

std::string shape_text(const std::vector<size_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

template <typename A>
std::vector<size_t> shape_of(const A& a) {
  std::vector<size_t> s(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) s[i] = a.shape(i);
  return s;
}

// A new float32 numpy array and where its floats are: numpy.empty, called
// through the vectorcall protocol with its arguments made here (a third of
// what a Python-level call costs). A fresh array's memory stays where it is.
struct NewArray {
  nb::object array;
  float* data = nullptr;
};

NewArray new_floats(const std::vector<size_t>& shape) {
  static PyObject* empty = nb::object(numpy().attr("empty")).release().ptr();
  static PyObject* float32 = numpy().attr("dtype")("float32").release().ptr();
  nb::object dims = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(shape.size())));
  if (!dims.is_valid()) throw nb::python_error();
  for (size_t i = 0; i < shape.size(); ++i) {
    PyObject* d = PyLong_FromSize_t(shape[i]);
    if (!d) throw nb::python_error();
    PyTuple_SET_ITEM(dims.ptr(), static_cast<Py_ssize_t>(i), d);
  }
  PyObject* args[2] = {dims.ptr(), float32};
  NewArray a{nb::steal(PyObject_Vectorcall(empty, args, 2, nullptr))};
  if (!a.array.is_valid()) throw nb::python_error();
  FloatOut view;
  if (!view.acquire(a.array, true)) raise(g_exc.error, "internal: numpy.empty gave no float32 buffer");
  a.data = view.data();
  return a;
}

// The output: `out` when given (checked: float32, C-contiguous, this shape,
// writable; held in `hold` for the call), else a new array.
nb::object output_for(nb::handle out, const std::vector<size_t>& shape, float** data, FloatOut* hold) {
  if (out.is_none()) {
    NewArray a = new_floats(shape);
    *data = a.data;
    return a.array;
  }
  if (!hold->acquire(out, true)) {
    raise(g_exc.input, "out: expected a writable C-contiguous float32 numpy array of shape " + shape_text(shape) +
                           ", got " + kind_of(out));
  }
  if (shape_of(*hold) != shape) {
    raise(g_exc.input, "out: expected shape " + shape_text(shape) + ", got " + shape_text(shape_of(*hold)));
  }
  *data = hold->data();
  return nb::borrow(out);
}

// ---------------------------------------------------------------- model --

struct AlignedFree {
  void operator()(void* p) const noexcept { std::free(p); }
};

void* aligned_bytes(size_t size) {
  const size_t rounded = (size + FERRY_ALIGNMENT - 1) / FERRY_ALIGNMENT * FERRY_ALIGNMENT;
  void* p = std::aligned_alloc(FERRY_ALIGNMENT, rounded ? rounded : FERRY_ALIGNMENT);
  if (!p) throw std::bad_alloc();
  return p;
}

// The model bytes and handle, shared by a Model and its sessions.
struct ModelData {
  std::unique_ptr<void, AlignedFree> bytes;
  size_t size = 0;
  ferry_model* model = nullptr;
  ferry_model_info info{};
  std::string file;  // the path it was read from, "" for bytes
  ~ModelData() { ferry_model_free(model); }
};

const char* layout_code(const ferry_model_info& i) {
  if (i.input_is_tokens) return i.batch_first ? "bt" : "tb";
  if (!i.has_time_axis) return "bf";
  return i.channels_first ? "bft" : i.batch_first ? "btf" : "tbf";
}

const char* output_layout_code(const ferry_model_info& i) {
  if (!i.output_is_sequence) return "bf";
  return i.output_layout == FERRY_LAYOUT_CHANNELS_FIRST ? "bft"
         : i.output_layout == FERRY_LAYOUT_BATCH_FIRST  ? "btf"
                                                        : "tbf";
}

ferry_backend backend_named(const std::string& name) {
  ferry_backend b;
  check(ferry_backend_from_name(name.c_str(), &b), "backend");
  return b;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) raise(g_exc.model, "'" + path + "': cannot be read: " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) raise(g_exc.model, "'" + path + "': read failed");
  return bytes;
}

std::shared_ptr<ModelData> load_model(const void* data, size_t size, std::string file) {
  auto d = std::make_shared<ModelData>();
  d->bytes.reset(aligned_bytes(size));
  if (size) std::memcpy(d->bytes.get(), data, size);
  d->size = size;
  d->file = std::move(file);
  const std::string what = d->file.empty() ? std::string("model") : "'" + d->file + "'";
  check(ferry_model_load(d->bytes.get(), size, nullptr, &d->model), what);
  d->info.struct_size = sizeof d->info;
  check(ferry_model_get_info(d->model, &d->info), what);
  return d;
}

nb::object json_loads(const std::string& text) { return nb::module_::import_("json").attr("loads")(nb::str(text.c_str(), text.size())); }

// One named part of a session's recurrent state (Session.state).
struct StatePart {
  std::string name;
  std::vector<size_t> shape;  // for the session's batch
  // Where its floats are in the packed state of `batch` samples (ferry.h,
  // ferry_state_get): `count` runs of `run` floats, `stride` apart, from
  // `offset` (a pooling layer's running values and count interleave per
  // sample; everything else is one run).
  size_t offset = 0, run = 0, stride = 0, count = 1;
};

// The state's parts in chain order, for `batch` samples, as the runtime's
// loaded model lays them out.
std::vector<StatePart> state_parts(const ModelData& d, size_t batch) {
  std::vector<StatePart> parts;
  const ferry_model* m = d.model;
  const auto* fm = ferry::fb::GetModel(d.bytes.get());
  std::vector<std::string> names;
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const auto* fl = fm->layers() && li < fm->layers()->size() ? fm->layers()->Get(li) : nullptr;
    names.push_back(fl && fl->name() ? fl->name()->str() : "layer" + std::to_string(li));
  }
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const ferry::Layer& l = m->layers[li];
    if (!l.state_floats) continue;
    std::string name = names[li];
    int same = 0;
    for (const std::string& n : names) same += n == name;
    if (same > 1) name += "#" + std::to_string(li);  // two layers of one name: the chain index tells them apart
    const size_t base = size_t{l.state_offset} * batch;
    if (ferry::op_is_recurrent(l.op)) {
      const size_t cells = size_t{l.num_layers} * l.dirs;
      StatePart h{name + ".h", {cells, batch, l.h_out}, base, cells * batch * l.h_out, 0, 1};
      parts.push_back(h);
      if (l.op == ferry::Op::kLstm)
        parts.push_back({name + ".c", {cells, batch, l.hidden}, base + h.run, cells * batch * l.hidden, 0, 1});
    } else if (l.op == ferry::Op::kConv1d) {
      const size_t steps = l.state_floats / l.in;
      parts.push_back({name + ".history", {batch, steps, l.in}, base, batch * l.state_floats, 0, 1});
    } else {  // mean / max pooling over time: [F] then the count, per sample
      const size_t f = l.state_floats - 1;
      parts.push_back({name + (l.op == ferry::Op::kMaxPool ? ".max" : ".sum"), {batch, f}, base, f, f + 1, batch});
      parts.push_back({name + ".count", {batch}, base + f, 1, f + 1, batch});
    }
  }
  return parts;
}

// The golden vectors stored in the model, run on `backend_name` in an
// arena of their own: {'passed', 'max_error', 'backend'}.
nb::dict run_selftest(const ModelData& d, const std::string& backend_name) {
  const ferry_backend backend = backend_named(backend_name);
  size_t bytes = 0;
  check(ferry_selftest_arena_size(d.model, &bytes), "selftest");
  std::unique_ptr<void, AlignedFree> arena(aligned_bytes(bytes));
  int passed = 0;
  float max_error = 0;
  ferry_status st;
  {
    nb::gil_scoped_release release;
    st = ferry_selftest(d.model, backend, arena.get(), bytes, &passed, &max_error);
  }
  check(st, "selftest on " + backend_name);
  nb::dict r;
  r["passed"] = passed != 0;
  r["max_error"] = max_error;
  r["backend"] = backend_name;
  return r;
}

class Session;

class Model {
 public:
  explicit Model(nb::handle source) {
    nb::object path = nb::none();
    if (PyUnicode_Check(source.ptr())) {
      path = nb::borrow(source);
    } else if (nb::hasattr(source, "__fspath__")) {
      path = source.attr("__fspath__")();
    }
    if (!path.is_none()) {
      if (!PyUnicode_Check(path.ptr())) raise(g_exc.model, "Model(path): a bytes path is not supported; pass str");
      const std::string p = nb::cast<std::string>(path);
      const std::string bytes = read_file(p);
      d_ = load_model(bytes.data(), bytes.size(), p);
    } else {
      Py_buffer view;
      if (PyObject_GetBuffer(source.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
        PyErr_Clear();
        raise(PyExc_TypeError, "Model(source): expected a path (str or os.PathLike) or the model's bytes "
                               "(bytes, bytearray, memoryview, a numpy array), got " + kind_of(source));
      }
      struct Release {
        Py_buffer* v;
        ~Release() { PyBuffer_Release(v); }
      } release{&view};
      d_ = load_model(view.buf, static_cast<size_t>(view.len), "");
    }
    summary_ = json_loads(ferry::cli::model_json(d_->model, static_cast<const uint8_t*>(d_->bytes.get()), d_->size, d_->file));
  }

  const ModelData& data() const {
    if (!d_) raise(g_exc.model, "the model is closed (Model.close()); sessions made before it go on working");
    return *d_;
  }
  std::shared_ptr<ModelData> shared() const {
    data();
    return d_;
  }
  nb::object summary(const char* key) const {
    data();
    return summary_[key];
  }
  void close() { d_.reset(); }
  bool closed() const { return !d_; }

  size_t arena_bytes(size_t batch, size_t max_seq, const std::string& backend) const {
    ferry_session_options o;
    ferry_session_options_init(&o);
    o.max_batch = batch;
    o.max_seq = max_seq;
    o.backend = backend_named(backend);
    size_t bytes = 0;
    check(ferry_session_arena_size(data().model, &o, &bytes), "arena size");
    return bytes;
  }

  nb::dict selftest(const std::string& backend) const { return run_selftest(data(), backend); }

  std::string repr() const {
    if (!d_) return "<ferry.Model (closed)>";
    const ferry_model_info& i = d_->info;
    return "<ferry.Model " + (d_->file.empty() ? std::string("from bytes") : "'" + d_->file + "'") + ": " +
           std::to_string(i.num_layers) + " layers, " + std::to_string(i.input_size) + " -> " +
           std::to_string(i.output_size) + ", input " + layout_code(i) + ", " + std::to_string(d_->size) + " bytes>";
  }

 private:
  std::shared_ptr<ModelData> d_;
  nb::object summary_;
};

// ------------------------------------------------------------- session --

class Session {
 public:
  Session(const Model& model, size_t batch, const std::string& backend, size_t threads, nb::handle max_seq_arg)
      : d_(model.shared()), batch_(batch), backend_name_(backend) {
    const ferry_model_info& info = d_->info;
    if (batch < 1) raise(g_exc.input, "batch: expected at least 1, got 0");
    max_seq_ = max_seq_arg.is_none() ? 1 : nb::cast<size_t>(max_seq_arg);
    if (max_seq_ < 1) raise(g_exc.input, "max_seq: expected at least 1, got 0");
    if (max_seq_arg.is_none() && info.min_seq > 1) max_seq_ = info.min_seq;
    ferry_session_options o;
    ferry_session_options_init(&o);
    o.max_batch = batch;
    o.max_seq = max_seq_;
    o.backend = backend_named(backend);
    threads_ = threads;
    if (threads != 1) {
      pool_ = ferry_threadpool_create(threads);
      if (!pool_) raise(g_exc.unsupported, "threads=" + std::to_string(threads) + ": this runtime has no thread pool (built without pthreadpool)");
      o.threadpool = pool_;
    }
    check(ferry_session_arena_size(d_->model, &o, &arena_bytes_), "session");
    arena_.reset(aligned_bytes(arena_bytes_));
    ferry_status st;
    {
      nb::gil_scoped_release release;
      st = ferry_session_init(d_->model, &o, arena_.get(), arena_bytes_, &s_);
    }
    if (st != FERRY_OK) {
      const std::string why = ferry_last_error();
      free_pool();
      raise_status(st, "session (backend " + backend + ")", why);
    }
    parts_ = state_parts(*d_, batch_);
  }
  ~Session() { close_quietly(); }

  // A call's hold on the session: the only one at a time.
  class Use {
   public:
    explicit Use(Session& s) : s_(s) {
      if (s.busy_.exchange(true)) {
        raise(g_exc.session, "this session is in use by another thread: a session is used by one thread at a time "
                             "(make one session per thread; they may share the model)");
      }
      if (!s.s_) {
        s.busy_ = false;
        raise(g_exc.session, "the session is closed");
      }
    }
    ~Use() { s_.busy_ = false; }

   private:
    Session& s_;
  };

  nb::object run(nb::handle x, nb::handle lengths, nb::handle out) {
    Use use(*this);
    const ferry_model_info& i = d_->info;
    if (i.input_is_tokens) raise(g_exc.input, "this model takes token ids: use run_tokens()");
    FloatIn a = float_array(x, "input");
    size_t b, t;
    sequence_shape(shape_of(a), false, &b, &t);
    return run_common(a.data(), nullptr, b, t, lengths, out);
  }

  nb::object run_tokens(nb::handle ids, nb::handle lengths, nb::handle out) {
    Use use(*this);
    if (!d_->info.input_is_tokens) raise(g_exc.input, "this model takes float features, not token ids: use run()");
    IntIn a = int_array(ids, "token ids");
    size_t b, t;
    sequence_shape(shape_of(a), true, &b, &t);
    return run_common(nullptr, a.data(), b, t, lengths, out);
  }

  nb::object step(nb::handle x, nb::handle out) {
    Use use(*this);
    const ferry_model_info& i = d_->info;
    if (i.input_is_tokens) raise(g_exc.input, "this model takes token ids: use step_tokens()");
    FloatIn a = float_array(x, "input");
    const bool single = a.ndim() == 1;
    if (!((a.ndim() == 2 && a.shape(0) >= 1 && a.shape(0) <= batch_ && a.shape(1) == i.input_size) ||
          (single && a.shape(0) == i.input_size))) {
      raise(g_exc.input, "input: a step takes [batch, " + std::to_string(i.input_size) + "] (batch 1 to " +
                             std::to_string(batch_) + ") or [" + std::to_string(i.input_size) + "], got shape " +
                             shape_text(shape_of(a)));
    }
    const size_t b = single ? 1 : a.shape(0);
    return step_into(b, single, out, [&](float* y, size_t n) { return ferry_step(s_, a.data(), b, y, n); });
  }

  nb::object step_tokens(nb::handle ids, nb::handle out) {
    Use use(*this);
    const ferry_model_info& i = d_->info;
    if (!i.input_is_tokens) raise(g_exc.input, "this model takes float features, not token ids: use step()");
    IntIn a = int_array(ids, "token ids");
    const bool single = a.ndim() == 0;
    if (!(single || (a.ndim() == 1 && a.shape(0) >= 1 && a.shape(0) <= batch_))) {
      raise(g_exc.input, "token ids: a step takes [batch] ids (batch 1 to " + std::to_string(batch_) +
                             ") or one id, got shape " + shape_text(shape_of(a)));
    }
    const size_t b = single ? 1 : a.shape(0);
    return step_into(b, single, out, [&](float* y, size_t n) { return ferry_step_tokens(s_, a.data(), b, y, n); });
  }

  // The packed state of the session's batch (ferry_state_get's layout).
  nb::object state_vector() { return state_flat().array; }

  NewArray state_flat() {
    Use use(*this);
    const size_t n = batch_ * d_->info.state_floats;
    NewArray a = new_floats({n});
    check(ferry_state_get(s_, batch_, a.data, n), "state");
    return a;
  }

  void set_state_vector(nb::handle v) {
    Use use(*this);
    FloatIn a = float_array(v, "state");
    const size_t n = batch_ * d_->info.state_floats;
    if (a.size() != n) {
      raise(g_exc.input, "state: expected " + std::to_string(n) + " floats (" + std::to_string(d_->info.state_floats) +
                             " per sample, batch " + std::to_string(batch_) + "), got " + std::to_string(a.size()));
    }
    check(ferry_state_set(s_, batch_, a.data(), n), "state");
  }

  nb::dict state() {
    const NewArray flat = state_flat();
    nb::dict out;
    for (const StatePart& p : parts_) {
      NewArray a = new_floats(p.shape);
      float* dst = a.data;
      for (size_t k = 0; k < p.count; ++k, dst += p.run)
        std::memcpy(dst, flat.data + p.offset + k * p.stride, p.run * sizeof(float));
      out[p.name.c_str()] = a.array;
    }
    return out;
  }

  void set_state(nb::handle values) {
    if (!nb::hasattr(values, "items")) {
      raise(g_exc.input, "state: expected a dict of arrays by name (" + part_names() + "), got " + kind_of(values));
    }
    const NewArray flat = state_flat();
    nb::object items = nb::steal(PyMapping_Items(values.ptr()));
    if (!items.is_valid()) throw nb::python_error();
    for (nb::handle item : items) {
      const nb::object key = item[0];
      if (!PyUnicode_Check(key.ptr())) raise(g_exc.input, "state: keys are the part names (" + part_names() + ")");
      const std::string name = nb::cast<std::string>(key);
      const StatePart* part = nullptr;
      for (const StatePart& p : parts_) if (p.name == name) part = &p;
      if (!part) raise(g_exc.input, "state: no part named '" + name + "' (this model's: " + part_names() + ")");
      FloatIn a = float_array(item[1], ("state['" + name + "']").c_str());
      if (shape_of(a) != part->shape) {
        raise(g_exc.input, "state['" + name + "']: expected shape " + shape_text(part->shape) + ", got " +
                               shape_text(shape_of(a)));
      }
      const float* src = a.data();
      for (size_t k = 0; k < part->count; ++k, src += part->run)
        std::memcpy(flat.data + part->offset + k * part->stride, src, part->run * sizeof(float));
    }
    set_state_vector(flat.array);
  }

  nb::dict state_shapes() const {
    nb::dict out;
    for (const StatePart& p : parts_) out[p.name.c_str()] = nb::tuple(nb::cast(p.shape));
    return out;
  }

  void reset() {
    Use use(*this);
    check(ferry_state_reset(s_), "reset");
  }

  nb::dict selftest() {
    Use use(*this);
    return run_selftest(*d_, backend_name_);
  }

  void close() {
    if (busy_.exchange(true)) raise(g_exc.session, "the session is in use by another thread and cannot be closed now");
    close_quietly();
    busy_ = false;
  }

  bool closed() const { return s_ == nullptr; }
  size_t arena_bytes() const { return arena_bytes_; }
  size_t batch() const { return batch_; }
  size_t max_seq() const { return max_seq_; }
  size_t threads() const { return threads_; }
  const std::string& backend() const { return backend_name_; }

  std::string repr() const {
    return "<ferry.Session " + backend_name_ + ", batch " + std::to_string(batch_) + ", max_seq " +
           std::to_string(max_seq_) + ", arena " + std::to_string(arena_bytes_) + " bytes" +
           (s_ ? "" : " (closed)") + ">";
  }

 private:
  // One step's output ([b, output_size], or [output_size] for a lone
  // sample), filled by `call(y, floats)` without the GIL.
  template <typename Call>
  nb::object step_into(size_t b, bool single, nb::handle out, Call&& call) {
    const size_t o = d_->info.output_size;
    float* y = nullptr;
    FloatOut hold;
    nb::object result = output_for(out, single ? std::vector<size_t>{o} : std::vector<size_t>{b, o}, &y, &hold);
    ferry_status st;
    {
      nb::gil_scoped_release release;
      st = call(y, b * o);
    }
    check(st, "step");
    return result;
  }

  // [T,B,F] / [B,T,F] / [B,F,T] (or [B,F] without a time axis; token ids
  // [T,B] / [B,T] / [B]): the batch and the steps, checked against the
  // session.
  void sequence_shape(const std::vector<size_t>& s, bool tokens, size_t* b, size_t* t) const {
    const ferry_model_info& i = d_->info;
    const std::string code = layout_code(i);
    const std::string f = std::to_string(i.input_size);
    std::string expected;
    bool ok = false;
    if (!i.has_time_axis) {
      expected = tokens ? "[B]" : "[B, " + f + "]";
      ok = tokens ? s.size() == 1 : (s.size() == 2 && s[1] == i.input_size);
      *b = ok ? s[0] : 0;
      *t = 1;
    } else if (tokens) {
      expected = code == "bt" ? "[B, T]" : "[T, B]";
      ok = s.size() == 2;
      *b = ok ? (code == "bt" ? s[0] : s[1]) : 0;
      *t = ok ? (code == "bt" ? s[1] : s[0]) : 0;
    } else if (code == "tbf") {
      expected = "[T, B, " + f + "]";
      ok = s.size() == 3 && s[2] == i.input_size;
      *t = ok ? s[0] : 0;
      *b = ok ? s[1] : 0;
    } else if (code == "btf") {
      expected = "[B, T, " + f + "]";
      ok = s.size() == 3 && s[2] == i.input_size;
      *b = ok ? s[0] : 0;
      *t = ok ? s[1] : 0;
    } else {
      expected = "[B, " + f + ", T]";
      ok = s.size() == 3 && s[1] == i.input_size;
      *b = ok ? s[0] : 0;
      *t = ok ? s[2] : 0;
    }
    const char* what = tokens ? "token ids" : "input";
    if (!ok) {
      raise(g_exc.input, std::string(what) + ": the model takes " + expected + " (layout " + code + "), got shape " +
                             shape_text(s));
    }
    if (*b < 1 || *b > batch_) {
      raise(g_exc.input, std::string(what) + ": batch " + std::to_string(*b) + " of shape " + shape_text(s) +
                             ": this session runs batches of 1 to " + std::to_string(batch_) +
                             " (Model.session(batch=...))");
    }
    if (*t > max_seq_) {
      raise(g_exc.input, std::string(what) + ": " + std::to_string(*t) + " steps: this session runs at most " +
                             std::to_string(max_seq_) + " (make it with Model.session(max_seq=" + std::to_string(*t) +
                             ") or more)");
    }
    if (*t < 1) raise(g_exc.input, std::string(what) + ": a sequence of 0 steps");
  }

  nb::object run_common(const float* x, const int32_t* ids, size_t b, size_t t, nb::handle lengths, nb::handle out) {
    const ferry_model_info& i = d_->info;
    IntIn len;
    const int32_t* len_data = nullptr;
    if (!lengths.is_none()) {
      len = int_array(lengths, "lengths");
      if (len.ndim() != 1 || len.shape(0) != b) {
        raise(g_exc.input, "lengths: expected " + std::to_string(b) + " values (one per sample), got shape " +
                               shape_text(shape_of(len)));
      }
      len_data = len.data();
    }
    size_t floats = 0;
    check(ferry_output_floats(d_->model, b, t, &floats), "input");
    std::vector<size_t> shape;
    if (!i.output_is_sequence) {
      shape = {b, i.output_size};
    } else {
      const size_t steps = floats / (b * i.output_size);
      const std::string o = output_layout_code(i);
      shape = o == "tbf" ? std::vector<size_t>{steps, b, i.output_size}
              : o == "btf" ? std::vector<size_t>{b, steps, i.output_size}
                           : std::vector<size_t>{b, i.output_size, steps};
    }
    float* y = nullptr;
    FloatOut hold;
    nb::object result = output_for(out, shape, &y, &hold);
    ferry_status st;
    {
      nb::gil_scoped_release release;
      st = ids ? ferry_run_tokens(s_, ids, b, t, len_data, y, floats) : ferry_run(s_, x, b, t, len_data, y, floats);
    }
    check(st, "run");
    return result;
  }

  std::string part_names() const {
    std::string s;
    for (const StatePart& p : parts_) s += (s.empty() ? "'" : ", '") + p.name + "'";
    return s.empty() ? "none: the model has no state" : s;
  }

  void free_pool() {
    if (pool_) ferry_threadpool_destroy(pool_);
    pool_ = nullptr;
  }

  void close_quietly() {
    if (s_) ferry_session_release(s_);
    s_ = nullptr;
    arena_.reset();
    free_pool();
  }

  std::shared_ptr<ModelData> d_;
  size_t batch_ = 1, max_seq_ = 1, threads_ = 1, arena_bytes_ = 0;
  std::string backend_name_;
  std::unique_ptr<void, AlignedFree> arena_;
  void* pool_ = nullptr;
  ferry_session* s_ = nullptr;
  std::atomic<bool> busy_{false};
  std::vector<StatePart> parts_;
};

// ------------------------------------------------------------ converter --

// Runs `body` without the GIL; a converter error becomes ConvertError (its
// one-line message), after the GIL is back.
template <typename F>
void converter_call(F&& body) {
  std::string message;
  int kind = 0;
  {
    nb::gil_scoped_release release;
    try {
      body();
    } catch (const ferry::conv::Error& e) {
      message = e.what();
      kind = 1;
    } catch (const std::bad_alloc&) {
      kind = 2;
    } catch (const std::exception& e) {
      message = std::string("internal: ") + e.what();
      kind = 1;
    }
  }
  if (kind == 1) raise(g_exc.convert, message);
  if (kind == 2) throw std::bad_alloc();
}

// `ferry convert ARGS` (IN OUT and options, parsed by its own declaration):
// the report as JSON; the file is at OUT.
std::string convert(const std::vector<std::string>& args) {
  ferry::cli::ConvertCall call;
  converter_call([&] { call = ferry::cli::parse_convert(args); });
  if (call.verbose) call.request.stage = [](const std::string& what) { std::fprintf(stderr, "ferry: %s\n", what.c_str()); };
  ferry::conv::ConvertResult result;
  converter_call([&] { result = ferry::conv::convert(call.request); });
  return ferry::cli::convert_report_json(result.report);
}

std::string inspect_json(const std::vector<std::string>& args) {
  std::string out;
  converter_call([&] { out = ferry::cli::inspect_json(args); });
  return out;
}

nb::list command_options(const std::string& command) {
  std::vector<ferry::cli::OptionInfo> options;
  converter_call([&] { options = ferry::cli::command_options(command); });
  nb::list out;
  for (const auto& o : options) {
    nb::dict d;
    d["name"] = o.name;
    d["flag"] = o.flag;
    d["multiple"] = o.multiple;
    d["type_name"] = o.type_name;
    d["description"] = o.description;
    d["default"] = o.default_value;
    out.append(d);
  }
  return out;
}

// The CLI in this process (`python -m ferry`): its signal handling while it
// runs (the first SIGINT cancels the file writers, then the process dies of
// it, as the command does), Python's handlers back afterwards.
int cli_main(const std::vector<std::string>& args) {
  std::vector<std::string> words = args;
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const int signals[] = {SIGINT, SIGTERM, SIGHUP, SIGXFSZ};
  struct sigaction saved[4];
  for (int i = 0; i < 4; ++i) sigaction(signals[i], nullptr, &saved[i]);
  int status;
  {
    nb::gil_scoped_release release;
    status = ferry::cli::run_cli(static_cast<int>(words.size()), argv.data());
  }
  for (int i = 0; i < 4; ++i) sigaction(signals[i], &saved[i], nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  return status;
}

}  // namespace

NB_MODULE(_ferry, m) {
  m.doc() = "ferry's runtime and converter (the compiled part of the ferry package; use `import ferry`).";

  g_exc.error = new_exception(m, "Error", PyExc_Exception,
                              "Every error ferry raises. .status is the C API's status name (FERRY_INVALID_ARGUMENT, "
                              "...) where one failed, else None.");
  g_exc.convert = new_exception(m, "ConvertError", g_exc.error,
                                "The converter could not read, map or write the model; the message is the CLI's one "
                                "line. Nothing was written.");
  nb::object model_bases = nb::make_tuple(nb::handle(g_exc.error), nb::handle(PyExc_ValueError));
  g_exc.model = new_exception(m, "ModelError", model_bases.ptr(),
                              "The model bytes fail verification, or the Model was closed.");
  nb::object input_bases = nb::make_tuple(nb::handle(g_exc.error), nb::handle(PyExc_ValueError));
  g_exc.input = new_exception(m, "InputError", input_bases.ptr(),
                              "An input, state or option does not fit the model or the session: a wrong shape or "
                              "dtype, a sequence longer than max_seq, a token id out of range.");
  g_exc.session = new_exception(m, "SessionError", g_exc.error,
                                "The session is closed, busy in another thread, or failed on its device.");
  g_exc.unsupported = new_exception(m, "UnsupportedError", g_exc.error,
                                    "Valid, but not supported here: a backend this build or machine lacks, step() on a "
                                    "model that cannot stream.");

  m.def("version", [] { return std::string(ferry_version()); }, "The runtime's version.");
  m.def("backend_names", [] {
    std::vector<std::string> names;
    for (int i = 0;; ++i) {
      const std::string n = ferry_backend_name(static_cast<ferry_backend>(i));
      if (n == "unknown") break;
      names.push_back(n);
    }
    return names;
  }, "Every backend the C API names (not all run on every machine: Model.backends says which run a model here).");

  nb::class_<Model>(m, "Model",
                    "A ferry model file (.fb), loaded and verified.\n\n"
                    "Model(source): source is a path (str or os.PathLike) or the model's bytes (bytes, bytearray, "
                    "memoryview, a uint8 numpy array). The bytes are copied once into aligned memory that lives as "
                    "long as the Model or any of its sessions. A file that fails verification raises ModelError "
                    "naming the field at fault.")
      .def(nb::init<nb::handle>(), "source"_a,
           nb::sig("def __init__(self, source: str | os.PathLike | bytes | bytearray | memoryview) -> None"))
      .def("session", [](const Model& self, size_t batch, const std::string& backend, size_t threads, nb::handle max_seq) {
             return new Session(self, batch, backend, threads, max_seq);
           }, "batch"_a = 1, "backend"_a = "auto", "threads"_a = 1, "max_seq"_a = nb::none(),
           nb::sig("def session(self, batch: int = 1, backend: str = 'auto', threads: int = 1, "
                   "max_seq: int | None = None) -> Session"),
           "A session for batches of up to `batch` samples and sequences of up to `max_seq` steps (None: 1, "
           "streaming with step(); the fewest a conv needs where more). Its arena is sized exactly "
           "(Session.arena_bytes) and owned by the session. backend: 'auto', 'reference', 'simd', 'xnnpack' or "
           "'cuda'. threads: the thread pool's size (1: none; 0: one per core).")
      .def("arena_bytes", &Model::arena_bytes, "batch"_a = 1, "max_seq"_a = 1, "backend"_a = "auto",
           "The exact arena bytes of a session with these limits (what a firmware build reserves).")
      .def("selftest", &Model::selftest, "backend"_a = "auto",
           "Runs the golden vectors stored in the file on `backend`: {'passed': bool, 'max_error': float, "
           "'backend': str}. UnsupportedError when the file stores none.")
      .def("close", &Model::close,
           "Releases this Model's hold on the bytes; sessions already made keep them and go on working.")
      .def_prop_ro("closed", &Model::closed)
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](Model& self, nb::args) { self.close(); })
      .def_prop_ro("input_size", [](const Model& s) { return s.data().info.input_size; }, "Features per time step.")
      .def_prop_ro("output_size", [](const Model& s) { return s.data().info.output_size; }, "Features of the output.")
      .def_prop_ro("layout", [](const Model& s) { return std::string(layout_code(s.data().info)); },
                   "The input's layout: 'tbf' [T,B,F], 'btf' [B,T,F], 'bft' [B,F,T]; token ids 'tb' / 'bt'; 'bf' "
                   "without a time axis.")
      .def_prop_ro("output_layout", [](const Model& s) { return std::string(output_layout_code(s.data().info)); },
                   "run()'s output layout: 'tbf', 'btf', 'bft', or 'bf' ([B,F]: no time axis, or a model that ends "
                   "in last / pooling).")
      .def_prop_ro("output_is_sequence", [](const Model& s) { return s.data().info.output_is_sequence != 0; })
      .def_prop_ro("has_time_axis", [](const Model& s) { return s.data().info.has_time_axis != 0; })
      .def_prop_ro("input_is_tokens", [](const Model& s) { return s.data().info.input_is_tokens != 0; },
                   "True for a model whose first layer is an Embedding: run_tokens() / step_tokens().")
      .def_prop_ro("streamable", [](const Model& s) { return s.data().info.streamable != 0; },
                   "True when step() runs it (no bidirectional layer, every Conv1d causal).")
      .def_prop_ro("min_seq", [](const Model& s) { return s.data().info.min_seq; },
                   "Fewest steps run() accepts (a Conv1d without padding needs its kernel's span).")
      .def_prop_ro("state_floats", [](const Model& s) { return s.data().info.state_floats; },
                   "Floats of recurrent state per sample.")
      .def_prop_ro("num_layers", [](const Model& s) { return s.data().info.num_layers; })
      .def_prop_ro("size", [](const Model& s) { return s.data().size; }, "The model file's bytes.")
      .def_prop_ro("file", [](const Model& s) { return s.data().file; }, "The path it was read from ('' for bytes).")
      .def_prop_ro("format", [](const Model& s) { return s.summary("format"); }, "The file format's version, '1.3'.")
      .def_prop_ro("layers", [](const Model& s) { return s.summary("layers"); },
                   "The chain: per layer its kind, name, input and output features, weight dtype (None without "
                   "weights) and, for recurrent layers, hidden, num_layers, bidirectional, proj.")
      .def_prop_ro("dtypes", [](const Model& s) {
                     nb::dict out;
                     for (nb::handle l : s.summary("layers")) {
                       if (!l["dtype"].is_none()) out[l["name"]] = l["dtype"];
                     }
                     return out;
                   }, "Weight dtype per layer with weights: {'lstm': 'F32', 'fc': 'I8'}.")
      .def_prop_ro("provenance", [](const Model& s) { return s.summary("provenance"); },
                   "Where it came from: the checkpoint's name, format and SHA-256, the converter's version.")
      .def_prop_ro("assumptions", [](const Model& s) { return s.summary("assumptions"); },
                   "Hyper-parameters the conversion had to assume (none when the checkpoint or --code said).")
      .def_prop_ro("backends", [](const Model& s) { return s.summary("backends"); },
                   "The backends that run this model on this machine, best first.")
      .def_prop_ro("backend_detail", [](const Model& s) { return s.summary("backend_detail"); },
                   "Every backend with whether it runs the model here and why not.")
      .def_prop_ro("metadata", [](const Model& s) {
        // The user's --meta entries, in stored order: text as str, one number
        // as float, an array as a float64 numpy array of its shape.
        const ferry_model* model = s.data().model;
        nb::dict out;
        const size_t n = ferry_model_metadata_count(model);
        for (size_t i = 0; i < n; ++i) {
          ferry_metadata e{};
          e.struct_size = sizeof e;
          if (ferry_model_metadata_at(model, i, &e) != FERRY_OK) throw std::runtime_error(ferry_last_error());
          if (e.type == FERRY_METADATA_TEXT) {
            out[e.key] = nb::str(e.text, e.text_bytes);
            continue;
          }
          std::vector<double> v(e.count);
          if (ferry_model_metadata_numbers(model, e.key, v.data(), v.size()) != FERRY_OK) {
            throw std::runtime_error(ferry_last_error());
          }
          if (e.rank == 0) {
            out[e.key] = nb::float_(v[0]);
            continue;
          }
          nb::list shape;
          for (size_t d = 0; d < e.rank; ++d) shape.append(e.shape[d]);
          out[e.key] = nb::module_::import_("numpy").attr("array")(nb::cast(v), "float64").attr("reshape")(nb::tuple(shape));
        }
        return out;
      }, "The metadata `ferry convert --meta` stored: a dict of str (text), float (a number) and float64 numpy "
         "arrays (a list or an .npy), in the order given.")
      .def("summary", [](const Model& s) { s.data(); return json_loads(ferry::cli::model_json(s.data().model,
                         static_cast<const uint8_t*>(s.data().bytes.get()), s.data().size, s.data().file)); },
           "The whole summary as a dict: what `ferry inspect --json` prints for the file.")
      .def("__repr__", &Model::repr);

  nb::class_<Session>(m, "Session",
                      "A model ready to run: its arena (exactly sized, owned here), the recurrent state, a backend. "
                      "Made by Model.session(). One thread at a time; the GIL is released while it computes.")
      .def("run", &Session::run, "x"_a.none(), "lengths"_a = nb::none(), "out"_a = nb::none(),
           nb::sig("def run(self, x: numpy.typing.ArrayLike, lengths: numpy.typing.ArrayLike | None = None, "
                   "out: numpy.ndarray | None = None) -> numpy.ndarray"),
           "Runs a whole sequence in the model's layout (Model.layout) from the session's state, leaving the final "
           "state there (reset() between independent sequences). x is float32 (a contiguous float32 array is read "
           "in place; anything else is converted once). lengths: each sample's valid steps. out: a float32 array "
           "of the output's shape to write into. Returns the output in Model.output_layout.")
      .def("run_tokens", &Session::run_tokens, "ids"_a.none(), "lengths"_a = nb::none(), "out"_a = nb::none(),
           nb::sig("def run_tokens(self, ids: numpy.typing.ArrayLike, lengths: numpy.typing.ArrayLike | None = None, "
                   "out: numpy.ndarray | None = None) -> numpy.ndarray"),
           "run() for a model taking token ids ([T,B] or [B,T] integers).")
      .def("step", &Session::step, "x"_a.none(), "out"_a = nb::none(),
           nb::sig("def step(self, x: numpy.typing.ArrayLike, out: numpy.ndarray | None = None) -> numpy.ndarray"),
           "One time step: x is [B, F] (or [F] for one sample), the state carried from the last call. Returns "
           "[B, output_size] (or [output_size]). T steps give exactly run()'s output.")
      .def("step_tokens", &Session::step_tokens, "ids"_a.none(), "out"_a = nb::none(),
           nb::sig("def step_tokens(self, ids: numpy.typing.ArrayLike, out: numpy.ndarray | None = None) -> numpy.ndarray"),
           "step() for a model taking token ids: [B] ids, or one.")
      .def_prop_rw("state", &Session::state, [](Session& s, nb::handle v) { s.set_state(v); },
                   nb::for_getter(nb::sig("def state(self) -> dict[str, numpy.ndarray]")),
                   nb::for_setter(nb::sig("def state(self, value: typing.Mapping[str, numpy.typing.ArrayLike], /) -> None")),
                   "The recurrent state by name, copies for the session's batch: '<layer>.h' [L*D, B, H_out] (and "
                   "'<layer>.c' [L*D, B, H] for an LSTM: PyTorch's h_n / c_n), '<conv>.history' [B, steps, F], "
                   "'<pool>.sum' or '.max' [B, F] with '<pool>.count' [B]. Assigning a dict sets the parts it names "
                   "(h0 / c0), the rest unchanged.")
      .def_prop_ro("state_shapes", &Session::state_shapes, "Each state part's shape, by name.")
      .def_prop_rw("state_vector", &Session::state_vector, [](Session& s, nb::handle v) { s.set_state_vector(v); },
                   nb::for_getter(nb::sig("def state_vector(self) -> numpy.ndarray")),
                   nb::for_setter(nb::sig("def state_vector(self, value: numpy.typing.ArrayLike, /) -> None")),
                   "The whole state as the C API packs it (ferry_state_get / ferry_state_set).")
      .def("reset", &Session::reset, "Sets the state to zero.")
      .def("selftest", &Session::selftest,
           "Runs the model's stored golden vectors on this session's backend (its own arena; this session's state "
           "is untouched): {'passed', 'max_error', 'backend'}.")
      .def("close", &Session::close, "Releases the arena (and a device backend's memory). Later calls raise SessionError.")
      .def_prop_ro("closed", &Session::closed)
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](Session& self, nb::args) { self.close(); })
      .def_prop_ro("arena_bytes", &Session::arena_bytes, "The arena's exact size (ferry_session_arena_size).")
      .def_prop_ro("batch", &Session::batch)
      .def_prop_ro("max_seq", &Session::max_seq)
      .def_prop_ro("threads", &Session::threads)
      .def_prop_ro("backend", &Session::backend)
      .def("__repr__", &Session::repr);

  m.def("_convert", &convert, "args"_a);
  m.def("_inspect_json", &inspect_json, "args"_a);
  m.def("_command_options", &command_options, "command"_a);
  m.def("_cli_main", &cli_main, "args"_a);
}
