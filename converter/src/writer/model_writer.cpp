#include "writer/model_writer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "error.h"
#include "io/atomic_file.h"
#include "pack/tensor_packing.h"
#include "writer/c_array.h"
#include "writer/metadata.h"
#include "writer/runtime_pass.h"

namespace ferry::conv {
namespace {

// Where the weight blob goes: the staging file, or the model's own memory.
class BlobSink {
 public:
  virtual ~BlobSink() = default;
  virtual void write(const uint8_t* data, size_t size) = 0;
  virtual void zeros(uint64_t size) = 0;
  virtual void copy_from(int fd, uint64_t offset, uint64_t size) = 0;
};

class FileSink : public BlobSink {
 public:
  explicit FileSink(AtomicFile& file) : file_(file) {}
  void write(const uint8_t* data, size_t size) override { file_.write(data, size); }
  void zeros(uint64_t size) override { file_.zeros(size); }
  void copy_from(int fd, uint64_t offset, uint64_t size) override { file_.copy_from(fd, offset, size); }

 private:
  AtomicFile& file_;
};

class MemorySink : public BlobSink {
 public:
  explicit MemorySink(uint8_t* at) : at_(at) {}
  void write(const uint8_t* data, size_t size) override {
    std::memcpy(at_, data, size);
    at_ += size;
  }
  void zeros(uint64_t size) override {
    std::memset(at_, 0, static_cast<size_t>(size));
    at_ += size;
  }
  void copy_from(int fd, uint64_t offset, uint64_t size) override {
    while (size > 0) {
      const ssize_t n = ::pread(fd, at_, static_cast<size_t>(size), static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        throw Error("cannot read the source file at offset " + std::to_string(offset) + ": " + std::strerror(errno));
      }
      at_ += n;
      offset += static_cast<uint64_t>(n);
      size -= static_cast<uint64_t>(n);
    }
  }

 private:
  uint8_t* at_;
};

// The weight blob, tensor after tensor, each padded to its successor's
// 64-byte-aligned offset.
void write_blob(const ModelPlan& plan, const std::vector<StoredForm>& forms, const BlobLayout& blob, int source_fd,
                BlobSink& sink, const Progress& progress) {
  std::vector<float> scratch;
  // Scales of quantized weights, kept from the weight until their own turn
  // (after the plan's tensors; a small fraction of the weights' bytes).
  std::vector<std::vector<uint8_t>> pending(forms.size());
  for (size_t i = 0; i < forms.size(); ++i) {
    const uint64_t bytes = forms[i].bytes;
    const uint64_t next = i + 1 < forms.size() ? blob.offsets[i + 1] : blob.size;
    if (i >= plan.tensors.size() || forms[i].dtype != DType::F32) {
      if (i >= plan.tensors.size()) {
        if (pending[i].size() != bytes) throw Error("internal: scales of tensor " + std::to_string(forms[i].scales_of));
        sink.write(pending[i].data(), pending[i].size());
        std::vector<uint8_t>().swap(pending[i]);
      } else {
        QuantizedTensor q = quantize_tensor(plan.tensors[i], forms[i]);
        sink.write(q.bytes.data(), q.bytes.size());
        if (forms[i].scales >= 0) pending[static_cast<size_t>(forms[i].scales)] = std::move(q.scales);
      }
      sink.zeros(next - (blob.offsets[i] + bytes));
      if (progress) progress(next, blob.size);
      continue;
    }
    const TensorPlan& t = plan.tensors[i];
    if (t.source_offset >= 0 && source_fd >= 0 && !forms[i].panel8) {
      // Stored as in the source: a file-to-file copy.
      sink.copy_from(source_fd, static_cast<uint64_t>(t.source_offset), bytes);
    } else {
      pack_tensor(t, forms[i], scratch, [&sink](const float* data, uint64_t count) {
        sink.write(reinterpret_cast<const uint8_t*>(data), static_cast<size_t>(count * sizeof(float)));
      });
    }
    sink.zeros(next - (blob.offsets[i] + bytes));
    if (progress) progress(next, blob.size);
  }
}

// A read-write shared mapping of the staging file: stores into it are the
// file's bytes (no fsync, as for the rest of the file).
class SharedMapping {
 public:
  SharedMapping(int fd, size_t size, const std::string& path) : size_(size) {
    data_ = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data_ == MAP_FAILED) throw Error("cannot map '" + path + "': " + std::strerror(errno));
  }
  ~SharedMapping() { ::munmap(data_, size_); }
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  uint8_t* data() const { return static_cast<uint8_t*>(data_); }

 private:
  void* data_;
  size_t size_;
};

// Steps 4 and 5 on the complete bytes: the source's hash (computed beside
// the weights), the runtime pass, then the C-array header written to its
// temporary file (committed by the caller, last).
void complete(uint8_t* data, size_t size, const ModelPlan& plan, const WriteOptions& options, WrittenModel& out,
              std::optional<AtomicFile>& header) {
  if (plan.source_sha256_async) fill_source_sha256(data, plan.source_sha256_async());
  CArrayMemory memory;
  out.arena_bytes = complete_with_runtime(data, size, plan.selftest.relative_tolerance,
                                          options.c_array_path ? &memory : nullptr, options.c_array_arenas);
  if (!options.c_array_path) return;
  out.c_array_name = c_array_name(*options.c_array_path);
  header.emplace(*options.c_array_path);
  const std::string text = c_array_text(data, size, out.c_array_name, options.c_array_source, &memory);
  header->write(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

}  // namespace

WrittenModel write_model(const ModelPlan& plan, const WriteOptions& options) {
  const std::vector<StoredForm> forms = stored_forms(plan);
  const BlobLayout blob = blob_layout(forms);
  EncodedModel model = encode_model(plan, forms, blob);
  ModelBytes& bytes = model.bytes;
  WrittenModel out;
  out.file_bytes = bytes.size();
  out.stored_weight_bytes = blob.size;
  std::optional<AtomicFile> header;

  if (options.path.empty()) {
    MemorySink sink(bytes.mutable_data() + model.blob_start);
    write_blob(plan, forms, blob, options.source_fd, sink, options.progress);
    complete(bytes.mutable_data(), bytes.size(), plan, options, out, header);
    if (header) header->commit();
    out.bytes = std::move(bytes);
    return out;
  }

  AtomicFile file(options.path);
  file.write(bytes.data(), static_cast<size_t>(model.blob_start));
  FileSink sink(file);
  write_blob(plan, forms, blob, options.source_fd, sink, options.progress);
  const uint64_t blob_end = model.blob_start + blob.size;
  file.write(bytes.data() + blob_end, static_cast<size_t>(bytes.size() - blob_end));
  bytes = ModelBytes();  // the metadata is in the file now
  {
    const SharedMapping written(file.fd(), out.file_bytes, options.path);
    complete(written.data(), out.file_bytes, plan, options, out, header);
  }
  file.commit();
  if (header) {
    try {
      header->commit();
    } catch (const Error&) {
      ::unlink(options.path.c_str());  // a failing conversion leaves no model behind
      throw;
    }
  }
  return out;
}

ModelBytes build_model(const ModelPlan& plan, const Progress& progress) {
  WriteOptions options;
  options.progress = progress;
  return write_model(plan, options).bytes;
}

}  // namespace ferry::conv
