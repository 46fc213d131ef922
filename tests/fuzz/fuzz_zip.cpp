// Fuzz target: the zip reader (converter/src/zip_reader.*) on arbitrary
// bytes: parse and validate, then read every record (STORED views, Deflate
// through the capped inflater), with and without CRC checking. Every view a
// record gives must lie inside the input.
#include <cstdint>
#include <string>
#include <vector>

#include "error.h"
#include "fuzz_support.h"
#include "io/zip_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry::conv;
  ZipOptions options;
  options.verify_crc = size % 2 == 1;
  try {
    const ZipReader zip(data, size, "fuzz.pt", options);
    for (const ZipEntry& e : zip.entries()) {
      try {
        if (e.method == ZipReader::kMethodStored) {
          const ByteSpan s = zip.stored(e);
          if (s.size > size || s.data < data || s.data + s.size > data + size)
            ferry::fuzz::invariant_failed("record '" + e.full_name + "' views bytes outside the archive");
        } else {
          const std::vector<uint8_t> v = zip.extract(e, size_t{1} << 20);
          if (v.size() != e.size) ferry::fuzz::invariant_failed("extract() size differs from the declared size");
        }
      } catch (const Error&) {
      }
    }
    (void)zip.find("data.pkl");
  } catch (const Error&) {
  }
  return 0;
}
