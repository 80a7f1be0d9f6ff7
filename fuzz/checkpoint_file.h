// Checkpoint files made by hand, as CheckpointWriter lays them out (fabric/checkpoint.h): for the
// checkpoint target's framed inputs and the hostile-size tests.
#pragma once

#include <arc/base/detail/crc32c.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace arc::fuzz {

/// A checkpoint of format `version` around `index` (the index's JSON text) and `data` (the bytes
/// between the header and the index, which begin at offset 16), with a valid trailer and index
/// checksum. Each index entry's "checksum" is computed afresh where its "offset" and "bytes" lie
/// inside `data`, so that a reader gets past its checksums to what they guard.
inline std::string checkpoint_file(uint8_t version, std::string index, std::string_view data) {
  constexpr uint64_t kHeaderBytes = 16;
  const auto put_u64 = [](std::string& out, uint64_t value) { out.append(reinterpret_cast<const char*>(&value), 8); };
  auto parsed = nlohmann::json::parse(index, nullptr, false);
  if (parsed.is_object() && parsed.contains("entries") && parsed["entries"].is_object()) {
    for (auto& [name, entry] : parsed["entries"].items()) {
      if (!entry.is_object() || !entry.contains("offset") || !entry.contains("bytes")) continue;
      if (!entry["offset"].is_number_integer() || !entry["bytes"].is_number_integer()) continue;
      if (entry["offset"].get<int64_t>() < 0 || entry["bytes"].get<int64_t>() < 0) continue;
      const auto offset = entry["offset"].get<uint64_t>(), bytes = entry["bytes"].get<uint64_t>();
      if (offset < kHeaderBytes || offset - kHeaderBytes > data.size() || bytes > data.size() - (offset - kHeaderBytes))
        continue;
      BlobChecksum sum;
      sum.update(data.data() + (offset - kHeaderBytes), bytes);
      entry["checksum"] = sum.hex();
    }
    index = parsed.dump();
  }
  std::string file("ARCCKPT", 8);
  put_u64(file, version);
  file.append(data);
  const uint64_t index_offset = file.size();
  file.append(index);
  put_u64(file, index_offset);
  put_u64(file, index.size());
  const uint32_t crc[2] = {crc32c(index.data(), index.size()), 0};
  file.append(reinterpret_cast<const char*>(crc), 8);
  file.append("ARCCKEND", 8);
  return file;
}

}  // namespace arc::fuzz
