// The planned part of a ConvertReport as JSON, shared by `ferry inspect
// --json` (a checkpoint's "plan") and convert_report_json (library.h), so the
// two spell it alike.
#pragma once

#include <nlohmann/json.hpp>

#include "convert.h"

namespace ferry::cli {

// graph, graph_inferred, layout, layout_source, output_layout, layers,
// assumptions, notes, and code (what --code read) where there is one.
nlohmann::ordered_json plan_json(const conv::ConvertReport& r);

}  // namespace ferry::cli
