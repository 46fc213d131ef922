// Text from a file, made safe to print on one line.
//
// Names a checkpoint holds (tensor keys, record names, class names, DCP
// paths) can contain any byte: a NUL, a newline, an escape sequence, bytes
// that are not UTF-8. Printed as they are, a NUL cuts an error line short
// (what() is a C string), a newline splits it, and a terminal escape
// rewrites what the user sees. escaped() spells every such byte out, so
// each message stays whole and one line, and says what the file holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ferry::conv {

// `text` with each C0 control byte and DEL written as an escape (\0, \t, \n,
// \r, else \xNN) and each byte that is not part of well-formed UTF-8 as \xNN;
// everything else (printable ASCII, well-formed UTF-8, backslashes) kept.
// Idempotent: escaped(escaped(s)) == escaped(s), so a message wrapped in
// another message is escaped once.
std::string escaped(std::string_view text);

// The length (2..4) of the well-formed UTF-8 sequence of a non-ASCII lead
// byte at p[0], of the n bytes at p; 0 where none starts there (a stray or
// cut byte, an overlong form, a code point above U+10FFFF). Encoded
// surrogates are accepted, as CPython's 'surrogatepass' writes them.
size_t utf8_sequence(const uint8_t* p, size_t n);

// Text from a file as a message quotes it: each control or non-ASCII byte
// as '?', at most `max` bytes, "..." after a text that was cut.
std::string printable(std::string_view s, size_t max = 200);

// The last component of a path (a directory's trailing '/' is not one), as
// messages name a file.
std::string basename_of(std::string path);

}  // namespace ferry::conv
