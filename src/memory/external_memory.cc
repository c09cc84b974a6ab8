#include "memory/external_memory.h"

#include <cstdint>
#include <string>

namespace kvtier {

namespace {

class ExternalHostMemory final : public DeviceMemory {
 public:
  explicit ExternalHostMemory(std::span<std::byte> bytes) : bytes_(bytes) {}
  std::byte* data() override { return bytes_.data(); }
  const std::byte* data() const override { return bytes_.data(); }
  size_t size() const override { return bytes_.size(); }
  MemoryBackend backend() const override { return MemoryBackend::kCpu; }
  bool host_accessible() const override { return true; }

 private:
  std::span<std::byte> bytes_;
};

}  // namespace

Status validate_external_memory(std::span<const std::byte> bytes) {
  if (bytes.empty()) return Status::InvalidArgument("external memory: empty buffer");
  const auto addr = reinterpret_cast<uintptr_t>(bytes.data());
  if (addr % kExternalMemoryAlignment != 0)
    return Status::InvalidArgument("external memory: address must be " + std::to_string(kExternalMemoryAlignment) +
                                   "-byte aligned (it is " + std::to_string(addr % kExternalMemoryAlignment) +
                                   " bytes past a boundary)");
  return Status::Ok();
}

Result<std::unique_ptr<DeviceMemory>> adopt_host_memory(std::span<std::byte> bytes) {
  KVTIER_RETURN_IF_ERROR(validate_external_memory(bytes));
  return std::unique_ptr<DeviceMemory>(new ExternalHostMemory(bytes));
}

}  // namespace kvtier
