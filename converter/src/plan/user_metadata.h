// User metadata (`ferry convert --meta KEY=VALUE`, schema/ferry.fbs
// Model.metadata): parsed from the command line's words into entries the
// writer stores, within the limits the runtime's loader enforces
// (runtime/src/shared/metadata_rules.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::conv {

struct MetaValue {
  std::string key;
  bool is_text = true;
  std::string text;              // is_text: UTF-8
  std::vector<double> numbers;   // otherwise, row-major over `shape`
  std::vector<uint32_t> shape;   // empty: one number
};

// KEY=VALUE, where VALUE is
//   @FILE         a .npy file's numbers (float32/64, int32/64), else the
//                 file's bytes as UTF-8 text (a labels file, one per line);
//   text:ANY      ANY as text, whatever it looks like;
//   N or N,N,...  a decimal number, or a list of them (a 1-D array);
//   anything else as text.
// Throws Error naming the word at fault.
MetaValue parse_meta(const std::string& word);

// Every entry, and all of them together, within the limits; each key once.
void check_meta(const std::vector<MetaValue>& entries);

// One line for people: "text, 12 bytes" / "number 16000" / "numbers [40]".
std::string describe_meta(const MetaValue& v);

}  // namespace ferry::conv
