// Reader for the zip container PyTorch writes (torch.save since 1.6,
// torch.jit.save). See PYTORCH_FORMAT.md §1.1.
//
// The reader works on bytes the caller owns (normally a MappedFile) and never
// copies a STORED record: `stored()` returns a view into those bytes. The
// bytes must outlive the reader and every view it returned.
//
// Everything is validated once, in the constructor, against the archive size:
//   - the end-of-central-directory record is found by scanning back from the
//     end (at most 22 + 65535 bytes, the largest possible comment), and must
//     end exactly at the end of the file (its comment length says so);
//   - zip64 records (PyTorch always writes them) are read through the zip64
//     locator; multi-disk archives are refused;
//   - every central-directory entry's local header, name, extra field and
//     data lie inside the archive, before the central directory, with
//     overflow-checked arithmetic; entries do not overlap; names are unique,
//     not absolute and have no `..` component; the entry count is bounded;
//   - all entries share one top-level folder, the "prefix" (`archive/`,
//     `sd/`, ...), taken from entry 0. Records are looked up by their name
//     *below* that folder ("data.pkl", "data/0"), never by position.
//     ZipOptions::root_records also admits an archive whose entry 0 has no
//     folder (torch.export's <= 2.7 archives, written by Python's zipfile):
//     its prefix is empty and names are the stored names.
// Sizes always come from the central directory: PyTorch's local headers set
// flag 0x08 and leave CRC and sizes at 0. The data offset is
// local_header_offset + 30 + local name length + local extra length, because
// the 64-byte alignment padding lives only in the *local* extra field.
//
// CRC-32 checking is off by default (torch can save with CRC 0, and still
// loads such files); ZipOptions::verify_crc turns it on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ferry::conv {

// A read-only view of bytes owned by someone else.
struct ByteSpan {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

struct ZipEntry {
  std::string name;            // below the prefix: "data.pkl", "data/0"
  std::string full_name;       // as stored: "archive/data.pkl"
  uint16_t method = 0;         // 0 = STORED, 8 = Deflate
  uint16_t flags = 0;
  uint32_t crc32 = 0;          // from the central directory
  uint64_t compressed_size = 0;
  uint64_t size = 0;           // uncompressed size
  uint64_t local_header_offset = 0;
  uint64_t data_offset = 0;    // first byte of the (compressed) data
};

struct ZipOptions {
  bool verify_crc = false;           // check CRC-32 when a record is read
  size_t max_entries = size_t{1} << 20;
  // Admit entries at the root (no top-level folder): prefix() is then empty
  // when entry 0 has no folder. Off for everything torch.save writes.
  bool root_records = false;
};

class ZipReader {
 public:
  static constexpr uint16_t kMethodStored = 0;
  static constexpr uint16_t kMethodDeflate = 8;

  // Parses and validates the archive in [data, data + size). `label` names
  // the archive in error messages (normally the file path). Throws Error.
  ZipReader(const uint8_t* data, size_t size, std::string label,
            ZipOptions options = {});

  // True when the bytes start with a local file header (`PK\x03\x04`).
  static bool has_zip_signature(const uint8_t* data, size_t size);

  // The shared top-level folder, without the trailing '/'; empty for an
  // archive of root records (ZipOptions::root_records).
  const std::string& prefix() const { return prefix_; }
  const std::string& label() const { return label_; }

  // Entries in central-directory order.
  const std::vector<ZipEntry>& entries() const { return entries_; }

  // The entry named `name` below the prefix, or nullptr.
  const ZipEntry* find(std::string_view name) const;

  // A view of a STORED entry's bytes. Throws Error for another method, or on
  // a CRC mismatch when verify_crc is set.
  ByteSpan stored(const ZipEntry& entry) const;
  // Same, by name below the prefix; throws Error naming the record if absent.
  ByteSpan stored(std::string_view name) const;

  // The uncompressed bytes of a STORED or Deflate entry, refusing entries
  // whose size exceeds `max_size`. Deflate needs a build with zlib
  // (FERRY_HAVE_ZLIB); without it Deflate entries throw Error.
  std::vector<uint8_t> extract(const ZipEntry& entry, size_t max_size) const;

  // Whether this build can inflate Deflate entries.
  static bool inflate_supported();

  // "<label>: record '<full name>'", for error messages by callers.
  std::string describe(const ZipEntry& entry) const;
  // The same for a record named `name` below the prefix, present or not.
  std::string describe(std::string_view name) const;

 private:
  void parse();
  void check_crc(const ZipEntry& entry, const uint8_t* bytes, size_t n) const;

  const uint8_t* data_;
  size_t size_;
  std::string label_;
  ZipOptions options_;
  std::string prefix_;
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string, size_t> by_name_;  // name below prefix
};

// Standard CRC-32 (IEEE 802.3, as zip uses), for verification and tests.
uint32_t crc32_ieee(const uint8_t* data, size_t size, uint32_t crc = 0);

}  // namespace ferry::conv
