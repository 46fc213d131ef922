// Checkpoint reading: detect_format() tells the container from the first
// bytes (PYTORCH_FORMAT.md §0), then one reader turns the file into the
// Checkpoint. This dispatcher is the only file that knows every reader.
#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <cstring>

#include "checkpoint/dcp.h"
#include "checkpoint/legacy.h"
#include "checkpoint/legacy_tar.h"
#include "checkpoint/pt2.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/torchscript.h"
#include "checkpoint/zip_checkpoint.h"
#include "error.h"
#include "io/sha256.h"
#include "io/zip_reader.h"
#include "mapping/wrapper_prefixes.h"

namespace ferry::conv {
namespace {

using namespace detail;

enum class Format { Empty, Zip, LegacyPickle, OtherPickle, Tar, Safetensors, Preview2018, Unknown };

Format detect_format(const uint8_t* d, size_t n) {
  if (n == 0) return Format::Empty;
  if (ZipReader::has_zip_signature(d, n)) return Format::Zip;
  if (n >= 262 && std::memcmp(d + 257, "ustar", 5) == 0) return Format::Tar;
  if (n >= 8 && std::memcmp(d, "PYTORCH1", 8) == 0) return Format::Preview2018;
  if (n >= 2 && d[0] == 0x80 && d[1] >= 2 && d[1] <= 5) {
    // The legacy stream opens with LONG1 of the 10-byte magic number
    // 0x1950a86a20f9469cfc6c, after PROTO and (protocol 4+) a FRAME.
    static const uint8_t kMagic[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
    size_t at = 2;
    if (n >= 11 && d[2] == 0x95) at = 11;
    if (n >= at + sizeof kMagic && std::memcmp(d + at, kMagic, sizeof kMagic) == 0) return Format::LegacyPickle;
    return Format::OtherPickle;
  }
  // safetensors: u64 header length, then the JSON object. Its limits are
  // checked by the reader, which names them; here only the shape counts.
  if (n >= 9 && d[8] == '{') return Format::Safetensors;
  return Format::Unknown;
}

// A zip that two of torch's readers would both read, as two models, is
// refused. torch.load and torch.export.load both open a zip with
// PyTorchStreamReader, whose records are those below the folder of entry 0:
// torch.export.load reads a PT2 archive there (archive_format, models/), and
// torch.load that folder's data.pkl as a torch.save checkpoint, or, beside a
// constants.pkl, hands the archive to torch.jit.load as TorchScript. A root
// archive (torch.export <= 2.7) is none of torch.load's (no folder), and a
// TorchScript archive's own data.pkl is its one reading; the weights of a
// torch 2.8 .pt2 are torch.save zips nested in data/weights/, not a second
// reading of the outer one.
void refuse_ambiguous_zip(const ZipReader& zip, const std::string& path) {
  if (zip.prefix().empty() || !is_pt2(zip)) return;
  const ZipEntry* pkl = zip.find("data.pkl");
  if (!pkl) return;
  std::string graph = zip.find("archive_format")->full_name;
  for (const ZipEntry& e : zip.entries())
    if (e.name.size() > 12 && e.name.compare(0, 7, "models/") == 0 && e.name.find('/', 7) == std::string::npos &&
        e.name.compare(e.name.size() - 5, 5, ".json") == 0) {
      graph = e.full_name;
      break;
    }
  const ZipEntry* constants = zip.find("constants.pkl");
  const std::string other = constants ? "a TorchScript archive (" + constants->full_name + ", " + pkl->full_name + ")"
                                      : "a torch.save checkpoint (" + pkl->full_name + ")";
  throw Error(path + ": ambiguous: a torch.export archive (" + graph + ") and " + other + " in one zip; torch.load" +
              (constants ? " (which hands it to torch.jit.load)" : "") +
              " and torch.export.load would read different models");
}

Checkpoint read_file(const MappedFile& file, const LoadOptions& options) {
  const std::string& path = file.path();
  const uint8_t* d = file.data();
  const size_t n = file.size();
  switch (detect_format(d, n)) {
    case Format::Zip: {
      // Root records are admitted for torch.export's <= 2.7 archives only.
      ZipOptions zip_options;
      zip_options.root_records = true;
      const ZipReader zip(file.data(), file.size(), path, zip_options);
      refuse_ambiguous_zip(zip, path);
      if (is_pt2(zip)) return read_pt2(zip, path, options);
      if (zip.prefix().empty())
        throw Error(path + ": zip archive: entry '" + zip.entries()[0].full_name + "' is not inside a top-level folder");
      return is_torchscript(zip, path) ? read_torchscript(zip, path, options) : read_zip_checkpoint(zip, path, options);
    }
    case Format::LegacyPickle:
      return read_legacy(file, options);
    case Format::Safetensors:
      return read_safetensors(file, options);
    case Format::Empty:
      throw Error(path + ": empty file");
    case Format::OtherPickle:
      throw Error(path + ": a Python pickle without the PyTorch magic number: not a torch.save checkpoint");
    case Format::Tar:
      return read_legacy_tar(file, options);
    case Format::Preview2018:
      throw Error(path + ": the 2018 'PYTORCH1' preview format is not supported (PyTorch itself refuses it)");
    case Format::Unknown:
      break;
  }
  std::string head;
  for (size_t i = 0; i < std::min<size_t>(n, 8); ++i) {
    static const char* digits = "0123456789abcdef";
    if (i) head += ' ';
    head += digits[d[i] >> 4];
    head += digits[d[i] & 15];
  }
  throw Error(path + ": not a PyTorch checkpoint (unrecognized header " + head + ")");
}

}  // namespace

const ModuleObject* Checkpoint::module_object(const std::string& path) const {
  const std::string wanted = strip_wrapper_prefixes(path);
  for (const ModuleObject& m : module_objects)
    if (m.path == wanted) return &m;
  return nullptr;
}

Checkpoint load_checkpoint(const MappedFile& file, const LoadOptions& options) {
  Checkpoint c = read_file(file, options);
  c.path = file.path();
  return c;
}

uint64_t CheckpointInput::bytes() const {
  uint64_t n = 0;
  for (const auto& f : files) n += f.second->size();
  return n;
}

std::string CheckpointInput::sha256() const {
  if (!directory) return sha256_file(*file);
  std::vector<DcpFile> list;
  for (const auto& [name, f] : files) list.push_back({name, f});
  return dcp_sha256(list);
}

CheckpointInput open_checkpoint(const std::string& path, const LoadOptions& options) {
  CheckpointInput in;
  if (is_directory(path)) {
    in.directory = true;
    std::vector<DcpFile> read;
    in.checkpoint = read_dcp_directory(path, options, &read);
    for (DcpFile& f : read) in.files.emplace_back(std::move(f.name), std::move(f.file));
    return in;
  }
  in.file = std::make_shared<const MappedFile>(path);
  const size_t slash = path.rfind('/');
  in.files.emplace_back(slash == std::string::npos ? path : path.substr(slash + 1), in.file);
  in.checkpoint = load_checkpoint(*in.file, options);
  return in;
}

}  // namespace ferry::conv
