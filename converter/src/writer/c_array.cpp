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

namespace {

std::string upper(const std::string& name) {
  std::string s;
  for (char c : name) s += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string u(size_t v) { return std::to_string(v) + "u"; }

// The memory macros (c_array.h), after the array.
std::string memory_text(const std::string& name, const CArrayMemory& m) {
  const std::string p = upper(name);
  std::string s;
  s += "/* The memory this model takes, exact for the target that compiles this\n"
       " * header: ferry/ferry_sizes.h adds the parts that hold pointers, whose\n"
       " * size depends on the target. The arena figures are for the CPU backend\n"
       " * with the reference kernels: what FERRY_BACKEND_AUTO runs on a core\n"
       " * without SIMD (Cortex-M, ESP32, RISC-V), and FERRY_BACKEND_REFERENCE\n"
       " * anywhere; ferry_session_arena_size() gives the same figure, and a\n"
       " * smaller buffer is refused at init (FERRY_ARENA_TOO_SMALL).\n"
       " *   static uint8_t handle[" + p + "_HANDLE_BYTES];  aligned to FERRY_ALIGNMENT\n"
       " *   static uint8_t arena[" + p + "_ARENA_BYTES];    likewise\n";
  for (const CArrayArena& a : m.arenas) {
    if (!a.refused.empty()) continue;
    s += " * On the machine that converted it: max_batch " + std::to_string(a.batch) + ", max_seq " +
         std::to_string(a.seq) + ": " + std::to_string(a.total) + " bytes.\n";
  }
  s += " */\n#include <ferry/ferry.h>\n\n";
  s += "#define " + p + "_MAX_CHAIN " + u(m.chain) + "  /* FERRY_MAX_CHAIN must be at least this */\n";
  s += "#define " + p + "_MAX_CELLS " + u(m.cells) + "  /* FERRY_MAX_CELLS likewise */\n";
  s += "#define " + p + "_HANDLE_BYTES FERRY_MODEL_HANDLE_BYTES  /* ferry_model_handle_size() */\n";
  for (size_t i = 0; i < m.arenas.size(); ++i) {
    const CArrayArena& a = m.arenas[i];
    const std::string macro = p + "_ARENA_BYTES" +
                              (i == 0 ? std::string() : "_B" + std::to_string(a.batch) + "_T" + std::to_string(a.seq));
    if (!a.refused.empty()) {
      std::string why = a.refused;
      for (size_t at; (at = why.find("*/")) != std::string::npos;) why.replace(at, 2, "* /");
      s += "/* No " + macro + ": " + why + " */\n";
      continue;
    }
    s += "#define " + macro + " FERRY_ARENA_BYTES_CPU(" + u(a.portable) + ", " + u(a.lone_cells) + ", " +
         u(a.program_ops) + ")  /* max_batch " + std::to_string(a.batch) + ", max_seq " + std::to_string(a.seq) +
         (i == 0 ? ": streaming, ferry_step" : "") + " */\n";
  }
  if (m.has_selftest) {
    const CArrayArena& a = m.selftest;
    s += "#define " + p + "_SELFTEST_ARENA_BYTES (FERRY_ARENA_BYTES_CPU(" + u(a.portable) + ", " + u(a.lone_cells) +
         ", " + u(a.program_ops) + ") + " + u(m.selftest_output_bytes) + ")  /* ferry_selftest(), reference kernels */\n";
  } else {
    s += "#define " + p + "_SELFTEST_ARENA_BYTES 0u  /* no self-test vectors in this model */\n";
  }
  s += "#if FERRY_MAX_CHAIN < " + std::to_string(m.chain) + " || FERRY_MAX_CELLS < " + std::to_string(m.cells) + "\n";
  s += "#error \"this model needs FERRY_MAX_CHAIN >= " + std::to_string(m.chain) + " and FERRY_MAX_CELLS >= " +
       std::to_string(m.cells) + " (ferry/ferry_sizes.h)\"\n#endif\n\n";
  return s;
}

}  // namespace

std::string c_array_text(const uint8_t* data, size_t size, const std::string& name, const std::string& source,
                         const CArrayMemory* memory) {
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
  s += "};\n\n#undef FERRY_C_ARRAY_ALIGNED_\n\n";
  if (memory) s += memory_text(name, *memory);
  s += "#endif  /* " + guard + " */\n";
  return s;
}

}  // namespace ferry::conv
