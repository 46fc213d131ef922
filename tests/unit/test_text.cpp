// escaped() (converter/src/text.h) and the Error it is built into: a name a
// file holds may contain any byte, and every message stays whole and one
// line.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "error.h"
#include "text.h"

namespace ferry::conv {
namespace {

TEST(Escaped, ControlBytesAreSpelledOut) {
  using namespace std::string_literals;
  EXPECT_EQ(escaped("__0_0.distcp\0/../x"s), "__0_0.distcp\\0/../x");
  EXPECT_EQ(escaped("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(escaped("\x1b[2Jcleared\x7f"), "\\x1b[2Jcleared\\x7f");
  EXPECT_EQ(escaped("\x01\x1f"), "\\x01\\x1f");
}

TEST(Escaped, Utf8IsKeptAndOtherBytesAreNot) {
  EXPECT_EQ(escaped("lstm.weight_ih_l0"), "lstm.weight_ih_l0");
  EXPECT_EQ(escaped("poids_\xc3\xa9t\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x98\x80"), "poids_\xc3\xa9t\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x98\x80");
  EXPECT_EQ(escaped("bad\xff\xfe"), "bad\\xff\\xfe");
  EXPECT_EQ(escaped("cut\xc3"), "cut\\xc3");                 // a sequence cut at the end
  EXPECT_EQ(escaped("over\xc0\xaf"), "over\\xc0\\xaf");      // an overlong '/'
  EXPECT_EQ(escaped("high\xf4\x90\x80\x80"), "high\\xf4\\x90\\x80\\x80");  // above U+10FFFF
}

TEST(Escaped, IsIdempotentAndKeepsBackslashes) {
  using namespace std::string_literals;
  const std::string raw = "x\0y\nz\xff\\w"s;
  EXPECT_EQ(escaped(escaped(raw)), escaped(raw));
  EXPECT_EQ(escaped("C:\\path"), "C:\\path");
}

TEST(Escaped, ErrorMessagesAreWholeAndOneLine) {
  using namespace std::string_literals;
  const Error e("relative_path: '__0_0.distcp\0\n' is not a plain file name"s);
  const std::string what = e.what();
  EXPECT_EQ(what, "relative_path: '__0_0.distcp\\0\\n' is not a plain file name");
  EXPECT_EQ(std::strlen(e.what()), what.size());
  // Wrapped in another message, escaped once.
  const Error outer(std::string("model.pt: ") + e.what());
  EXPECT_EQ(std::string(outer.what()), "model.pt: " + what);
}

}  // namespace
}  // namespace ferry::conv
