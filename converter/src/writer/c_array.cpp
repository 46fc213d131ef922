#include "writer/c_array.h"

#include <cctype>

namespace ferry::conv {

std::string c_array_name(const std::string& header_path) {
  std::string base = header_path.substr(header_path.rfind('/') == std::string::npos ? 0 : header_path.rfind('/') + 1);
  const size_t dot = base.find('.');
  if (dot != std::string::npos && dot > 0) base.resize(dot);
  std::string name;
  for (char c : base) name += std::isalnum(static_cast<unsigned char>(c)) || c == '_' ? c : '_';
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) name = "_" + name;
  return name;
}

std::string c_array_text(const uint8_t* data, size_t size, const std::string& name, const std::string& source) {
  std::string guard = "FERRY_C_ARRAY_";
  for (char c : name) guard += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  guard += "_H_";
  std::string s;
  s.reserve(size * 6 + 2048);
  s += "/* A ferry model as a C array, made by `ferry convert --c-array` from\n"
       " * " + source + ". Do not edit. Include it in one source file;\n"
       " * the array is const (flash on a microcontroller) and is used in place:\n"
       " *   ferry_model_load(" + name + ", " + name + "_len, &options, &model);\n"
       " * It is aligned to 64 bytes (FERRY_ALIGNMENT), as the weights inside expect. */\n"
       "#ifndef " + guard + "\n#define " + guard + "\n\n"
       "#include <stddef.h>\n#include <stdint.h>\n\n"
       "#if defined(__cplusplus) && __cplusplus >= 201103L\n"
       "#define FERRY_C_ARRAY_ALIGNED_ alignas(64)\n"
       "#elif defined(_MSC_VER)\n"
       "#define FERRY_C_ARRAY_ALIGNED_ __declspec(align(64))\n"
       "#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L\n"
       "#define FERRY_C_ARRAY_ALIGNED_ _Alignas(64)\n"
       "#else\n"
       "#define FERRY_C_ARRAY_ALIGNED_ __attribute__((aligned(64)))\n"
       "#endif\n\n"
       "static const size_t " + name + "_len = " + std::to_string(size) + "u;\n"
       "FERRY_C_ARRAY_ALIGNED_ static const uint8_t " + name + "[" + std::to_string(size) + "] = {\n";
  static const char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < size; ++i) {
    if (i % 16 == 0) s += "  ";
    s += "0x";
    s += kHex[data[i] >> 4];
    s += kHex[data[i] & 15];
    s += i + 1 == size ? "" : ",";
    s += (i % 16 == 15 || i + 1 == size) ? "\n" : " ";
  }
  s += "};\n\n#undef FERRY_C_ARRAY_ALIGNED_\n\n#endif  /* " + guard + " */\n";
  return s;
}

}  // namespace ferry::conv
