// Distributed checkpoints (torch.distributed.checkpoint, "DCP": what FSDP,
// tensor-parallel and other multi-GPU training save; PYTORCH_FORMAT.md §9).
//
// A DCP checkpoint is a directory, not a file:
//
//   .metadata          a plain pickle (not a zip): which tensors exist, their
//                      size and dtype, the chunks each was saved in (one per
//                      rank that held a shard), and where every chunk's bytes
//                      lie: storage_data {(fqn, chunk offsets) ->
//                      (relative_path, offset, length)};
//   __<rank>_<n>.distcp  data files: each chunk is the byte range
//                      [offset, offset + length) of one of them, and that
//                      range is itself a complete torch.save zip of one CPU
//                      tensor (its own archive/data.pkl and data/0; offsets
//                      inside it count from the range's start; ranges are not
//                      64-byte aligned).
//
// The reader:
//   - unpickles .metadata with the restricted unpickler narrowed to the
//     classes §9 lists (the DCP metadata dataclasses, torch.Size, dtypes,
//     torch.serialization._get_layout, pathlib.PosixPath): they become inert
//     data records; any other global is refused at the byte it appears;
//   - checks every record before a data file is opened: each tensor's chunks
//     lie inside it and tile it exactly (no gap, no overlap), each chunk has
//     a storage_data entry, whose relative_path is a plain file name of the
//     directory (no '/', no '..'); a transformed chunk (transform_descriptors,
//     e.g. zstd) is refused naming the transform;
//   - reads each chunk's range through the torch.save zip reader (zip, then
//     data.pkl, then data/0, each bounded by the range), and checks that the
//     tensor it holds has the chunk's sizes and the metadata's dtype;
//   - keeps a one-chunk tensor as a view of its mapped data file (no copy);
//     reassembles a sharded tensor (several chunks, usually in several files)
//     into memory it owns: exactly its numel x element size bytes, allocated
//     only once the chunks are known to tile it and to be backed by as many
//     stored elements as they view, so it is bounded by the bytes on disk;
//   - lists every non-tensor value (BytesStorageMetadata: a step counter,
//     a learning rate, a string, a list, a config dict's leaves, a module's
//     _extra_state, ...) as ignored, its metadata checked (a field-less
//     record, a storage_data entry, a byte range inside its data file) and
//     its bytes (a pickle of arbitrary Python objects) never unpickled;
//   - names tensors from planner_data (the key path before DCP flattened the
//     nested dicts: ("model", "lstm.weight_ih_l0")), and selects the model
//     entry as a torch.save training checkpoint is (checkpoint.h): --key, a
//     known key ("model", "state_dict", ...), else the largest top-level dict
//     holding only tensors; a bare saved state dict needs none.
// Every refusal is one Error line naming the file, the record and the field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "io/mapped_file.h"

namespace ferry::conv {

// One chunk of a tensor: the box [offsets, offsets + sizes) of its elements
// and the byte range of its data file that holds it.
struct DcpChunk {
  std::vector<int64_t> offsets, sizes;
  std::string file;         // relative_path: a plain name in the directory
  uint64_t offset = 0;      // the range [offset, offset + length) of `file`
  uint64_t length = 0;
};

// One entry of state_dict_metadata.
struct DcpEntry {
  std::string fqn;                 // the flattened key: "model.lstm.weight_ih_l0"
  // planner_data's key path, elements as text: {"model", "lstm.weight_ih_l0"};
  // {fqn} where the file records none.
  std::vector<std::string> path;
  // false: BytesStorageMetadata, a non-tensor value (a step counter, a
  // string, a list, None, ...: DCP stores each as a torch.save of the
  // object). Its one chunk has no offsets or sizes: only its byte range,
  // checked to lie inside its data file, never unpickled.
  bool is_tensor = false;
  std::string dtype;               // torch's name, "float32"
  std::vector<int64_t> size;
  std::vector<DcpChunk> chunks;    // checked to tile `size` exactly
};

struct DcpMetadata {
  std::string version;             // "1.0.0"; empty where the file records none
  std::vector<DcpEntry> entries;   // in state_dict_metadata order
};

// Limits on what a .metadata may declare (a hostile file cannot make the
// checks below cost more than these allow).
constexpr size_t kDcpMaxEntries = size_t{1} << 20;
constexpr size_t kDcpMaxChunksPerTensor = size_t{1} << 14;
constexpr size_t kDcpMaxRank = 64;

// Parses and checks a .metadata pickle held in [data, data + size). `label`
// names it in errors ("ckpt/.metadata"). Throws Error naming the record and
// field at fault: an off-list global, a field of the wrong type, chunks that
// overlap, leave a gap or reach past their tensor, a chunk without a
// storage_data entry, an unsafe relative_path, a transformed chunk.
DcpMetadata parse_dcp_metadata(const uint8_t* data, size_t size, const std::string& label);

// A file of the directory that was read, kept mapped.
struct DcpFile {
  std::string name;                         // ".metadata", "__0_0.distcp"
  std::shared_ptr<const MappedFile> file;
};

// Whether `path` is a directory (after following symlinks).
bool is_directory(const std::string& path);

// Why a non-tensor entry is not read (Checkpoint::ignored).
constexpr const char* kDcpNonTensorReason = "a non-tensor value (BytesStorageMetadata): not a model tensor";

// Reads the DCP directory `dir`: the metadata (.metadata, else the one
// __<rank>.metadata a rank wrote without collectives), then the chunks of the
// tensors selected (the model's; entries beside it are listed in `ignored`
// by their flattened key, unread; non-tensor values are listed there too,
// their byte ranges checked against their data files). `files_read`, when
// given, receives the metadata file and every data file opened, in name
// order (for provenance: dcp_sha256). Throws Error.
Checkpoint read_dcp_directory(const std::string& dir, const LoadOptions& options,
                              std::vector<DcpFile>* files_read = nullptr);

// A directory's SHA-256 for provenance: the SHA-256 of the text
// "<sha256 of file>  <name>\n" over `files` in name order, the metadata file
// first (its name sorts first) then every data file read. It is what
//   cd DIR && sha256sum .metadata __0_0.distcp __1_0.distcp | sha256sum
// prints, so a user can check it without ferry.
std::string dcp_sha256(const std::vector<DcpFile>& files);

}  // namespace ferry::conv
