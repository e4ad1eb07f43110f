// Private: pieces shared by the checkpoint and delta manifest parsers.
#pragma once

#include <cstddef>
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

// Checks that every tensor names one of `files` and that they are listed in file order, then
// by offset, none overlapping the one before. Returns each tensor's index into `files`;
// InvalidArgument "<where>: tensor '<name>' ..." otherwise.
StatusOr<std::vector<size_t>> CheckManifestTensorOrder(const std::vector<ManifestTensor>& tensors,
                                                       const std::vector<std::string_view>& files,
                                                       std::string_view where);

}  // namespace deltakv::deltasync
