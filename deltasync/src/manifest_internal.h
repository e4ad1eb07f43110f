// Private: pieces shared by the checkpoint and delta manifest parsers.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "deltasync/checkpoint.h"

namespace deltakv::deltasync {

// Parses a "tensors" array of the checkpoint manifest schema (name, dtype, shape, file,
// byte_range, adler32); rejects duplicate names.
StatusOr<std::vector<ManifestTensor>> ParseManifestTensors(const nlohmann::json& arr,
                                                           std::string_view where);
nlohmann::json ManifestTensorsToJson(const std::vector<ManifestTensor>& tensors);

}  // namespace deltakv::deltasync
