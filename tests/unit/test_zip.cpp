// Zip container reader (converter/src/io/zip_reader.h), on archives assembled
// byte by byte in the layout torch.save writes.
// The converter is optional (FERRY_CONVERTER); these tests need it.
#ifdef FERRY_HAVE_CONVERTER

#include <gtest/gtest.h>

#include <string>

#include "error.h"
#include "pt_builder.h"
#include "io/zip_reader.h"

namespace ferry::conv {
namespace {

using test::Bytes;
using test::bytes_of;
using test::ZipBuilder;

std::string view_text(ByteSpan s) { return std::string(reinterpret_cast<const char*>(s.data), s.size); }

// The message of the Error `f` throws ("" if it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

ZipReader open(const Bytes& zip, ZipOptions options = {}) {
  return ZipReader(zip.data(), zip.size(), "test.pt", options);
}

Bytes three_records(ZipBuilder z = ZipBuilder()) {
  z.add("archive/data.pkl", bytes_of("PICKLE"));
  z.add("archive/data/0", bytes_of("0123456789abcdef"));
  z.add("archive/version", bytes_of("3\n"), /*align=*/false);
  return z.finish();
}

TEST(ZipReader, ReadsAlignedStoredRecordsByName) {
  const Bytes zip = three_records();
  ZipReader r = open(zip);
  EXPECT_EQ(r.prefix(), "archive");
  ASSERT_EQ(r.entries().size(), 3u);
  EXPECT_EQ(r.entries()[1].name, "data/0");
  EXPECT_EQ(r.entries()[1].full_name, "archive/data/0");
  const ZipEntry* e = r.find("data/0");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->data_offset % 64, 0u);  // the FB padding extra was honoured
  EXPECT_EQ(view_text(r.stored(*e)), "0123456789abcdef");
  EXPECT_EQ(view_text(r.stored("data.pkl")), "PICKLE");
  EXPECT_EQ(view_text(r.stored("version")), "3\n");
  // Views point into the caller's bytes: no copy.
  EXPECT_GE(r.stored(*e).data, zip.data());
  EXPECT_LT(r.stored(*e).data, zip.data() + zip.size());
  EXPECT_EQ(r.find("missing"), nullptr);
  EXPECT_EQ(r.find("archive/data/0"), nullptr);  // names are below the prefix
  EXPECT_NE(error_of([&] { r.stored("missing"); }).find("'archive/missing' not found"), std::string::npos);
}

TEST(ZipReader, DataOffsetWithoutPadding) {
  ZipBuilder z;
  z.add("p/a", bytes_of("xyz"), /*align=*/false);
  const Bytes zip = z.finish();
  ZipReader r = open(zip);
  EXPECT_EQ(r.prefix(), "p");
  EXPECT_EQ(r.entries()[0].data_offset, 30u + 3u);
  EXPECT_EQ(view_text(r.stored("a")), "xyz");
}

TEST(ZipReader, Zip64ExtraFieldsInCentralDirectory) {
  ZipBuilder::Options o;
  o.zip64_fields = true;
  const Bytes zip = three_records(ZipBuilder(o));
  ZipReader r = open(zip);
  EXPECT_EQ(view_text(r.stored("data/0")), "0123456789abcdef");
  EXPECT_EQ(r.entries()[1].size, 16u);
  EXPECT_EQ(r.entries()[1].local_header_offset, ZipBuilder().add("archive/data.pkl", bytes_of("PICKLE")).body().size());
}

TEST(ZipReader, ClassicEndRecordOnlyAndComment) {
  ZipBuilder::Options o;
  o.zip64_end = false;
  o.comment = "a comment with a fake PK\x05\x06 signature inside";
  const Bytes zip = three_records(ZipBuilder(o));
  ZipReader r = open(zip);
  EXPECT_EQ(view_text(r.stored("data.pkl")), "PICKLE");
}

TEST(ZipReader, Zip64SaturatedWithoutLocatorIsRefused) {
  ZipBuilder::Options o;
  o.zip64_end = false;
  o.zip64_fields = true;  // EOCD offset 0xFFFFFFFF but no zip64 records
  const Bytes zip = three_records(ZipBuilder(o));
  EXPECT_NE(error_of([&] { open(zip); }).find("zip64"), std::string::npos);
}

TEST(ZipReader, EveryTruncationIsAnError) {
  const Bytes zip = three_records();
  for (size_t n = 0; n < zip.size(); ++n) {
    Bytes cut(zip.begin(), zip.begin() + long(n));
    EXPECT_THROW(open(cut), Error) << "truncated to " << n;
  }
}

TEST(ZipReader, NotAZipFile) {
  const Bytes junk = bytes_of(std::string(100, 'x'));
  const std::string msg = error_of([&] { open(junk); });
  EXPECT_NE(msg.find("test.pt"), std::string::npos);
  EXPECT_NE(msg.find("end-of-central-directory"), std::string::npos);
  EXPECT_FALSE(ZipReader::has_zip_signature(junk.data(), junk.size()));
  EXPECT_TRUE(ZipReader::has_zip_signature(three_records().data(), 4));
}

TEST(ZipReader, EntryPastEndOfArchive) {
  ZipBuilder z;
  z.add("archive/data.pkl", bytes_of("PICKLE"));
  z.add("archive/data/0", bytes_of("0123"));
  z.central()[1].compressed_size = z.central()[1].size = 1u << 30;
  EXPECT_NE(error_of([&] { open(z.finish()); }).find("runs past"), std::string::npos);
}

TEST(ZipReader, LocalHeaderOffsetOutside) {
  ZipBuilder z;
  z.add("archive/data.pkl", bytes_of("PICKLE"));
  z.central()[0].local_offset = 0xFFFFFF00u;
  EXPECT_NE(error_of([&] { open(z.finish()); }).find("outside the archive"), std::string::npos);
}

TEST(ZipReader, HugeZip64OffsetsDoNotOverflow) {
  ZipBuilder::Options o;
  o.zip64_fields = true;
  ZipBuilder z(o);
  z.add("archive/data.pkl", bytes_of("PICKLE"));
  z.central()[0].local_offset = UINT64_MAX - 10;
  EXPECT_THROW(open(z.finish()), Error);
  ZipBuilder z2(o);
  z2.add("archive/data.pkl", bytes_of("PICKLE"));
  z2.central()[0].compressed_size = z2.central()[0].size = UINT64_MAX;
  EXPECT_THROW(open(z2.finish()), Error);
}

TEST(ZipReader, OverlappingEntriesAreRefused) {
  ZipBuilder z;
  z.add("archive/a", bytes_of("AAAA"));
  z.add("archive/b", bytes_of("BBBB"));
  // Stretch a's data over b's local header (still before the directory).
  z.central()[0].compressed_size = z.central()[0].size = z.central()[1].local_offset;
  EXPECT_NE(error_of([&] { open(z.finish()); }).find("overlap"), std::string::npos);
}

TEST(ZipReader, SameLocalHeaderTwiceIsRefused) {
  ZipBuilder z;
  z.add("archive/a", bytes_of("AAAA"));
  z.add("archive/b", bytes_of("BBBB"));
  z.central()[1] = z.central()[0];
  z.central()[1].name = "archive/a";
  EXPECT_THROW(open(z.finish()), Error);  // duplicate name and overlap
}

TEST(ZipReader, DuplicateNamesAreRefused) {
  ZipBuilder z;
  z.add("archive/data/0", bytes_of("AAAA"));
  z.add("archive/data/0", bytes_of("BBBB"));
  EXPECT_NE(error_of([&] { open(z.finish()); }).find("duplicate entry 'archive/data/0'"), std::string::npos);
}

TEST(ZipReader, UnsafeNamesAreRefused) {
  for (const char* name : {"archive/../evil", "archive/data/../../x", "/archive/x", "archive//x",
                           "archive/./x", "archive\\..\\x"}) {
    ZipBuilder z;
    z.add(name, bytes_of("x"));
    EXPECT_NE(error_of([&] { open(z.finish()); }).find("unsafe"), std::string::npos) << name;
  }
}

TEST(ZipReader, PrefixMustBeShared) {
  ZipBuilder z;
  z.add("sd/data.pkl", bytes_of("x"));
  z.add("other/data/0", bytes_of("y"));
  EXPECT_NE(error_of([&] { open(z.finish()); }).find("not under the folder 'sd/'"), std::string::npos);

  ZipBuilder flat;
  flat.add("data.pkl", bytes_of("x"));
  EXPECT_NE(error_of([&] { open(flat.finish()); }).find("top-level folder"), std::string::npos);

  ZipBuilder bare;
  bare.add("sd/data.pkl", bytes_of("x"));
  bare.add("sd/", Bytes{});  // the folder itself is not a record under it
  EXPECT_THROW(open(bare.finish()), Error);
}

TEST(ZipReader, EntryCountIsBounded) {
  const Bytes zip = three_records();
  ZipOptions o;
  o.max_entries = 2;
  EXPECT_NE(error_of([&] { open(zip, o); }).find("too many entries"), std::string::npos);
}

TEST(ZipReader, StoredSizesMustAgree) {
  ZipBuilder z;
  z.add("archive/a", bytes_of("AAAA"));
  z.central()[0].size = 3;
  EXPECT_NE(error_of([&] { open(z.finish()); }).find("sizes differ"), std::string::npos);
}

TEST(ZipReader, EncryptedEntriesAreRefused) {
  ZipBuilder z;
  z.add("archive/a", bytes_of("AAAA"));
  z.central()[0].flags |= 1;
  EXPECT_NE(error_of([&] { open(z.finish()); }).find("encrypted"), std::string::npos);
}

TEST(ZipReader, LocalNameMustMatch) {
  ZipBuilder z;
  z.add("archive/a", bytes_of("AAAA"));
  z.central()[0].name = "archive/b";
  EXPECT_NE(error_of([&] { open(z.finish()); }).find("local header name"), std::string::npos);
}

TEST(ZipReader, CrcIsCheckedOnlyWhenAsked) {
  ZipBuilder z;
  z.add("archive/a", bytes_of("AAAA"));
  z.central()[0].crc = 0;  // torch with set_crc32_options(False)
  const Bytes zip = z.finish();
  EXPECT_EQ(view_text(open(zip).stored("a")), "AAAA");
  ZipOptions o;
  o.verify_crc = true;
  ZipReader strict = open(zip, o);
  EXPECT_NE(error_of([&] { strict.stored("a"); }).find("CRC-32 mismatch"), std::string::npos);

  ZipBuilder good;
  good.add("archive/a", bytes_of("AAAA"));
  EXPECT_EQ(view_text(open(good.finish(), o).stored("a")), "AAAA");
}

TEST(ZipReader, Crc32MatchesKnownValue) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32_ieee(reinterpret_cast<const uint8_t*>(s.data()), s.size()), 0xCBF43926u);
}

TEST(ZipReader, DeflateRecords) {
  const Bytes text = bytes_of("def forward(self, x):\n    return x\n");
  ZipBuilder z;
  z.add("archive/code/m.py", test::deflate_stored_blocks(text), false, 8, text.size(), test::test_crc32(text));
  const Bytes zip = z.finish();
  ZipOptions o;
  o.verify_crc = true;
  ZipReader r = open(zip, o);
  const ZipEntry& e = *r.find("code/m.py");
  EXPECT_NE(error_of([&] { r.stored(e); }).find("compression method 8"), std::string::npos);
  if (ZipReader::inflate_supported()) {
    const std::vector<uint8_t> out = r.extract(e, 1 << 20);
    EXPECT_EQ(Bytes(out.begin(), out.end()), text);
    EXPECT_NE(error_of([&] { r.extract(e, 4); }).find("exceeds the limit"), std::string::npos);
  } else {
    EXPECT_NE(error_of([&] { r.extract(e, 1 << 20); }).find("zlib"), std::string::npos);
  }
}

TEST(ZipReader, DeflateSizeMismatchIsRefused) {
  if (!ZipReader::inflate_supported()) GTEST_SKIP() << "built without zlib";
  const Bytes text = bytes_of("0123456789");
  for (uint64_t declared : {uint64_t{5}, uint64_t{20}}) {
    ZipBuilder z;
    z.add("archive/x", test::deflate_stored_blocks(text), false, 8, declared);
    const Bytes zip = z.finish();
    ZipReader r = open(zip);
    EXPECT_THROW(r.extract(*r.find("x"), 1 << 20), Error) << declared;
  }
}

TEST(ZipReader, ExtractCopiesStoredRecords) {
  const Bytes zip = three_records();
  ZipReader r = open(zip);
  const std::vector<uint8_t> out = r.extract(*r.find("data.pkl"), 100);
  EXPECT_EQ(std::string(out.begin(), out.end()), "PICKLE");
}

// Corrupting any single byte must give an Error or a valid reading, never a
// crash (run under the sanitizers to make this meaningful).
TEST(ZipReader, SingleByteCorruptionNeverCrashes) {
  const Bytes zip = three_records();
  for (size_t i = 0; i < zip.size(); ++i) {
    for (uint8_t v : {uint8_t(0x00), uint8_t(0xFF), uint8_t(zip[i] ^ 0x40)}) {
      Bytes bad = zip;
      bad[i] = v;
      try {
        ZipReader r = open(bad);
        for (const ZipEntry& e : r.entries()) {
          if (e.method == 0) r.stored(e);
        }
      } catch (const Error&) {
      }
    }
  }
}

}  // namespace
}  // namespace ferry::conv

#endif  // FERRY_HAVE_CONVERTER
