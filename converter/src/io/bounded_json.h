// A JSON document from a hostile file, parsed by nlohmann-json only after
// its size is bounded and its nesting measured, so that no walk of the
// document can run deep: the .pt2 records (checkpoint/pt2_json.h) and
// notebooks given to --code (mapping/python_source.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace ferry::conv {

constexpr size_t kMaxJsonBytes = size_t{64} << 20;
constexpr int kMaxJsonDepth = 128;

// Parses `size` bytes; throws Error starting with `label` when they are more
// than kMaxJsonBytes, nest deeper than kMaxJsonDepth, or are not JSON
// (with nlohmann's position).
nlohmann::json parse_bounded_json(const uint8_t* data, size_t size, const std::string& label);

}  // namespace ferry::conv
