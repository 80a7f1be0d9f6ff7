// torch.save's format, written through LibTorch's pickler and zip writer.
#include <arc/fabric/detail/torch_save.h>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

namespace arc::detail {

std::vector<char> torch_save_bytes(const c10::IValue& value) {
  std::vector<char> pickled;
  torch::jit::Pickler pickler(
      [&](const char* bytes, size_t size) { pickled.insert(pickled.end(), bytes, bytes + size); }, nullptr, nullptr,
      nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::vector<char> container;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    const auto* bytes = static_cast<const char*>(data);
    container.insert(container.end(), bytes, bytes + size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return container;
}

}  // namespace arc::detail
