#include "io/zip_reader.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "error.h"

#ifdef FERRY_HAVE_ZLIB
#include <zlib.h>
#endif

namespace ferry::conv {
namespace {

constexpr uint32_t kLocalHeaderSig = 0x04034b50;    // PK\3\4
constexpr uint32_t kCentralHeaderSig = 0x02014b50;  // PK\1\2
constexpr uint32_t kEocdSig = 0x06054b50;           // PK\5\6
constexpr uint32_t kZip64EocdSig = 0x06064b50;      // PK\6\6
constexpr uint32_t kZip64LocatorSig = 0x07064b50;   // PK\6\7
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kEocdSize = 22;
constexpr size_t kZip64EocdSize = 56;
constexpr size_t kZip64LocatorSize = 20;
constexpr size_t kMaxCommentSize = 0xFFFF;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint16_t kFlagEncrypted = 0x0001;

uint16_t le16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t le32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) |
         (uint32_t(p[3]) << 24);
}
uint64_t le64(const uint8_t* p) { return uint64_t(le32(p)) | (uint64_t(le32(p + 4)) << 32); }

std::string hex(uint64_t v) {
  char buf[32];
  snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// A name is safe when it is relative and has no empty, "." or ".." component
// (a trailing '/' for directory entries is tolerated).
bool is_safe_name(const std::string& name) {
  if (name.empty() || name[0] == '/' || name.find('\\') != std::string::npos ||
      name.find('\0') != std::string::npos)
    return false;
  size_t start = 0;
  while (start < name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    std::string_view part(name.data() + start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

}  // namespace

uint32_t crc32_ieee(const uint8_t* data, size_t size, uint32_t crc) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

ZipReader::ZipReader(const uint8_t* data, size_t size, std::string label, ZipOptions options)
    : data_(data), size_(size), label_(std::move(label)), options_(options) {
  parse();
}

bool ZipReader::has_zip_signature(const uint8_t* data, size_t size) {
  return size >= 4 && le32(data) == kLocalHeaderSig;
}

bool ZipReader::inflate_supported() {
#ifdef FERRY_HAVE_ZLIB
  return true;
#else
  return false;
#endif
}

std::string ZipReader::describe(const ZipEntry& entry) const {
  return label_ + ": record '" + entry.full_name + "'";
}

std::string ZipReader::describe(std::string_view name) const {
  return label_ + ": record '" + (prefix_.empty() ? std::string() : prefix_ + "/") + std::string(name) + "'";
}

void ZipReader::parse() {
  const std::string where = label_ + ": zip archive: ";
  // [offset, offset + len) lies inside the archive.
  auto inside = [&](uint64_t offset, uint64_t len) {
    return offset <= size_ && len <= size_ - offset;
  };

  // --- End of central directory: scan back over at most a maximal comment.
  if (size_ < kEocdSize) throw Error(where + "truncated (" + std::to_string(size_) + " bytes)");
  const size_t scan_floor = size_ - kEocdSize > kMaxCommentSize ? size_ - kEocdSize - kMaxCommentSize : 0;
  size_t eocd = SIZE_MAX;
  for (size_t pos = size_ - kEocdSize + 1; pos-- > scan_floor;) {
    // The comment length must account for exactly the rest of the file, so
    // a signature that happens to appear inside a comment is not taken.
    if (le32(data_ + pos) == kEocdSig && pos + kEocdSize + le16(data_ + pos + 20) == size_) {
      eocd = pos;
      break;
    }
  }
  if (eocd == SIZE_MAX)
    throw Error(where + "no end-of-central-directory record (truncated or not a zip file)");

  const uint8_t* e = data_ + eocd;
  if (le16(e + 4) != 0 || le16(e + 6) != 0) throw Error(where + "multi-disk archives are not supported");
  uint64_t entry_count = le16(e + 10);
  uint64_t cd_size = le32(e + 12);
  uint64_t cd_offset = le32(e + 16);
  uint64_t cd_limit = eocd;  // the central directory ends before this

  // --- Zip64: a locator right before the classic EOCD points at the zip64
  // EOCD, whose 64-bit counts replace the saturated 16/32-bit ones.
  if (eocd >= kZip64LocatorSize && le32(data_ + eocd - kZip64LocatorSize) == kZip64LocatorSig) {
    const size_t locator = eocd - kZip64LocatorSize;
    const uint8_t* l = data_ + locator;
    if (le32(l + 4) != 0 || le32(l + 16) > 1)
      throw Error(where + "multi-disk archives are not supported");
    const uint64_t z = le64(l + 8);
    if (z > locator || locator - z < kZip64EocdSize)
      throw Error(where + "zip64 end-of-central-directory offset " + std::to_string(z) +
                  " is outside the archive");
    const uint8_t* r = data_ + z;
    if (le32(r) != kZip64EocdSig)
      throw Error(where + "bad zip64 end-of-central-directory signature at byte " + std::to_string(z));
    if (le32(r + 16) != 0 || le32(r + 20) != 0)
      throw Error(where + "multi-disk archives are not supported");
    entry_count = le64(r + 32);
    cd_size = le64(r + 40);
    cd_offset = le64(r + 48);
    cd_limit = z;
  } else if (entry_count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    throw Error(where + "zip64 archive without a zip64 locator");
  }

  if (cd_offset > cd_limit || cd_size > cd_limit - cd_offset)
    throw Error(where + "central directory (offset " + std::to_string(cd_offset) + ", size " +
                std::to_string(cd_size) + ") is outside the archive");
  if (entry_count > options_.max_entries)
    throw Error(where + "too many entries (" + std::to_string(entry_count) + ", limit " +
                std::to_string(options_.max_entries) + ")");
  if (entry_count > cd_size / kCentralHeaderSize)
    throw Error(where + "central directory too small for " + std::to_string(entry_count) + " entries");

  // --- Central directory entries.
  entries_.reserve(entry_count);
  uint64_t pos = cd_offset;
  const uint64_t cd_end = cd_offset + cd_size;
  for (uint64_t i = 0; i < entry_count; ++i) {
    const std::string at = where + "central directory entry " + std::to_string(i) + " (byte " +
                           std::to_string(pos) + "): ";
    if (cd_end - pos < kCentralHeaderSize) throw Error(at + "truncated");
    const uint8_t* c = data_ + pos;
    if (le32(c) != kCentralHeaderSig) throw Error(at + "bad signature " + hex(le32(c)));
    ZipEntry entry;
    entry.flags = le16(c + 8);
    entry.method = le16(c + 10);
    entry.crc32 = le32(c + 16);
    entry.compressed_size = le32(c + 20);
    entry.size = le32(c + 24);
    const uint16_t name_len = le16(c + 28);
    const uint16_t extra_len = le16(c + 30);
    const uint16_t comment_len = le16(c + 32);
    const uint16_t disk = le16(c + 34);
    entry.local_header_offset = le32(c + 42);
    const uint64_t var_len = uint64_t(name_len) + extra_len + comment_len;
    if (cd_end - pos - kCentralHeaderSize < var_len) throw Error(at + "name or extra field runs past the central directory");
    entry.full_name.assign(reinterpret_cast<const char*>(c + kCentralHeaderSize), name_len);

    // Zip64 extra: u64 values only for the fields saturated at 0xFFFFFFFF,
    // in the fixed order usize, csize, local header offset.
    const uint8_t* extra = c + kCentralHeaderSize + name_len;
    bool need_usize = entry.size == 0xFFFFFFFF;
    bool need_csize = entry.compressed_size == 0xFFFFFFFF;
    bool need_offset = entry.local_header_offset == 0xFFFFFFFF;
    for (size_t x = 0; x + 4 <= extra_len;) {
      const uint16_t id = le16(extra + x);
      const uint16_t len = le16(extra + x + 2);
      if (len > extra_len - x - 4) throw Error(at + "extra field runs past its end");
      if (id == kZip64ExtraId) {
        const uint8_t* z = extra + x + 4;
        size_t left = len;
        auto take = [&](uint64_t& field) {
          if (left < 8) throw Error(at + "zip64 extra field too short");
          field = le64(z);
          z += 8;
          left -= 8;
        };
        if (need_usize) take(entry.size);
        if (need_csize) take(entry.compressed_size);
        if (need_offset) take(entry.local_header_offset);
        need_usize = need_csize = need_offset = false;
      }
      x += 4 + size_t(len);
    }
    if (need_usize || need_csize || need_offset) throw Error(at + "missing zip64 extra field");
    if (disk != 0 && disk != 0xFFFF) throw Error(at + "multi-disk archives are not supported");

    if (!is_safe_name(entry.full_name))
      throw Error(at + "unsafe or empty name '" + entry.full_name + "'");
    if (entry.flags & kFlagEncrypted) throw Error(at + "'" + entry.full_name + "' is encrypted");
    if (entry.method == kMethodStored && entry.compressed_size != entry.size)
      throw Error(at + "'" + entry.full_name + "' is stored but its sizes differ");

    // Local header: it and the data must lie before the central directory.
    const uint64_t lho = entry.local_header_offset;
    if (!inside(lho, kLocalHeaderSize) || lho + kLocalHeaderSize > cd_offset)
      throw Error(at + "local header of '" + entry.full_name + "' at byte " + std::to_string(lho) +
                  " is outside the archive");
    const uint8_t* lh = data_ + lho;
    if (le32(lh) != kLocalHeaderSig)
      throw Error(at + "bad local header signature for '" + entry.full_name + "' at byte " + std::to_string(lho));
    const uint16_t local_name_len = le16(lh + 26);
    const uint16_t local_extra_len = le16(lh + 28);
    const uint64_t data_offset = lho + kLocalHeaderSize + local_name_len + local_extra_len;
    // data_offset cannot overflow (lho <= size, the rest < 2^17), but the
    // data must end before the central directory.
    if (data_offset > cd_offset || entry.compressed_size > cd_offset - data_offset)
      throw Error(at + "data of '" + entry.full_name + "' (offset " + std::to_string(data_offset) +
                  ", size " + std::to_string(entry.compressed_size) + ") runs past the end of the entries");
    if (local_name_len != name_len ||
        std::memcmp(lh + kLocalHeaderSize, entry.full_name.data(), name_len) != 0)
      throw Error(at + "local header name differs from central directory name '" + entry.full_name + "'");
    entry.data_offset = data_offset;

    entries_.push_back(std::move(entry));
    pos += kCentralHeaderSize + var_len;
  }

  // --- Prefix: the folder of entry 0, shared by every entry.
  if (entries_.empty()) throw Error(where + "no entries");
  const size_t slash = entries_[0].full_name.find('/');
  const bool at_root = slash == std::string::npos;
  if (at_root && !options_.root_records)
    throw Error(where + "entry '" + entries_[0].full_name + "' is not inside a top-level folder");
  prefix_ = at_root ? std::string() : entries_[0].full_name.substr(0, slash);
  for (size_t i = 0; i < entries_.size(); ++i) {
    ZipEntry& entry = entries_[i];
    if (at_root) {
      entry.name = entry.full_name;
    } else {
      if (entry.full_name.size() <= prefix_.size() + 1 ||
          entry.full_name.compare(0, prefix_.size() + 1, prefix_ + "/") != 0)
        throw Error(where + "entry '" + entry.full_name + "' is not under the folder '" + prefix_ + "/'");
      entry.name = entry.full_name.substr(prefix_.size() + 1);
    }
    if (!by_name_.emplace(entry.name, i).second)
      throw Error(where + "duplicate entry '" + entry.full_name + "'");
  }

  // --- No two entries may share bytes: [local header, end of data).
  std::vector<size_t> order(entries_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return entries_[a].local_header_offset < entries_[b].local_header_offset;
  });
  for (size_t k = 1; k < order.size(); ++k) {
    const ZipEntry& prev = entries_[order[k - 1]];
    const ZipEntry& next = entries_[order[k]];
    if (prev.data_offset + prev.compressed_size > next.local_header_offset)
      throw Error(where + "entries '" + prev.full_name + "' and '" + next.full_name + "' overlap");
  }
}

const ZipEntry* ZipReader::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

void ZipReader::check_crc(const ZipEntry& entry, const uint8_t* bytes, size_t n) const {
  if (!options_.verify_crc) return;
  const uint32_t crc = crc32_ieee(bytes, n);
  if (crc != entry.crc32)
    throw Error(describe(entry) + ": CRC-32 mismatch (stored " + hex(entry.crc32) + ", computed " +
                hex(crc) + ")");
}

ByteSpan ZipReader::stored(const ZipEntry& entry) const {
  if (entry.method != kMethodStored)
    throw Error(describe(entry) + ": compression method " + std::to_string(entry.method) +
                " where an uncompressed (stored) record is required");
  // Sizes were checked against the archive in parse(), so they fit size_t.
  ByteSpan span{data_ + entry.data_offset, static_cast<size_t>(entry.size)};
  check_crc(entry, span.data, span.size);
  return span;
}

ByteSpan ZipReader::stored(std::string_view name) const {
  const ZipEntry* entry = find(name);
  if (!entry) throw Error(describe(name) + " not found");
  return stored(*entry);
}

std::vector<uint8_t> ZipReader::extract(const ZipEntry& entry, size_t max_size) const {
  if (entry.size > max_size)
    throw Error(describe(entry) + ": " + std::to_string(entry.size) + " bytes exceeds the limit of " +
                std::to_string(max_size));
  if (entry.method == kMethodStored) {
    ByteSpan span = stored(entry);
    return std::vector<uint8_t>(span.data, span.data + span.size);
  }
  if (entry.method != kMethodDeflate)
    throw Error(describe(entry) + ": unsupported compression method " + std::to_string(entry.method));
#ifdef FERRY_HAVE_ZLIB
  // Raw Deflate (no zlib header). The output buffer is exactly the declared
  // size; one probe byte past it detects a stream that inflates to more.
  std::vector<uint8_t> out(static_cast<size_t>(entry.size));
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) throw Error(describe(entry) + ": inflateInit2 failed");
  const uint8_t* in = data_ + entry.data_offset;
  uint64_t in_left = entry.compressed_size;
  size_t out_given = 0;
  uint8_t probe = 0;
  bool probing = false;
  constexpr uint64_t kChunk = uint64_t{1} << 30;  // zlib counts in 32-bit uInt
  int rc = Z_OK;
  for (;;) {
    if (zs.avail_in == 0 && in_left > 0) {
      zs.next_in = const_cast<Bytef*>(in);
      zs.avail_in = static_cast<uInt>(std::min(in_left, kChunk));
      in += zs.avail_in;
      in_left -= zs.avail_in;
    }
    if (zs.avail_out == 0) {
      if (out_given < out.size()) {
        const size_t chunk = static_cast<size_t>(std::min<uint64_t>(out.size() - out_given, kChunk));
        zs.next_out = out.data() + out_given;
        zs.avail_out = static_cast<uInt>(chunk);
        out_given += chunk;
      } else {
        zs.next_out = &probe;
        zs.avail_out = 1;
        probing = true;
      }
    }
    rc = inflate(&zs, Z_NO_FLUSH);
    if (probing && zs.avail_out == 0) break;  // produced more than declared
    if (rc != Z_OK) break;  // Z_STREAM_END, or an error / no progress (truncated)
  }
  const uint64_t produced = zs.total_out;
  inflateEnd(&zs);
  if (probing && zs.avail_out == 0)
    throw Error(describe(entry) + ": inflated data is larger than the declared " +
                std::to_string(entry.size) + " bytes");
  if (rc != Z_STREAM_END || produced != entry.size)
    throw Error(describe(entry) + ": corrupt Deflate data (" + std::to_string(produced) + " of " +
                std::to_string(entry.size) + " bytes inflated)");
  check_crc(entry, out.data(), out.size());
  return out;
#else
  throw Error(describe(entry) + ": Deflate-compressed record, but this build has no zlib");
#endif
}

}  // namespace ferry::conv
