#include "io/sha256.h"

#include <openssl/evp.h>

#include <algorithm>
#include <memory>

#include "error.h"
#include "io/page_release.h"

namespace ferry::conv {
namespace {

using Context = std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)>;

Context start() {
  Context ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw Error("internal: SHA-256 failed");
  return ctx;
}

void update(const Context& ctx, const uint8_t* data, size_t size) {
  if (EVP_DigestUpdate(ctx.get(), data, size) != 1) throw Error("internal: SHA-256 failed");
}

std::string finish(const Context& ctx) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx.get(), digest, &len) != 1) throw Error("internal: SHA-256 failed");
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

}  // namespace

std::string sha256_hex(const uint8_t* data, size_t size) {
  const Context ctx = start();
  update(ctx, data, size);
  return finish(ctx);
}

std::string sha256_file(const MappedFile& file) {
  const Context ctx = start();
  constexpr size_t kChunk = size_t{16} << 20;
  for (size_t done = 0; done < file.size(); done += kChunk) {
    const size_t n = std::min(kChunk, file.size() - done);
    update(ctx, file.data() + done, n);
    release_pages(file, file.data() + done, n);
  }
  return finish(ctx);
}

}  // namespace ferry::conv
