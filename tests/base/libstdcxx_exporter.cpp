// A shared library built as a pip PyTorch's LibTorch is: with libstdc++ linked statically, whose
// std::filesystem it exports. The link-order test loads it ahead of libstdc++.
#include <filesystem>
#include <system_error>

/// Calls what Arclight calls of std::filesystem, so that this library links those parts in and exports
/// them; the test locates the library by this function's address.
std::uintmax_t exporter_remove_tree(const std::filesystem::path& root) {
  std::error_code error;
  for (std::filesystem::directory_iterator it(root, error), end; it != end; it.increment(error)) {
  }
  for (std::filesystem::recursive_directory_iterator it(root, error), end; it != end; it.increment(error)) {
  }
  std::filesystem::create_directories(root, error);
  return std::filesystem::remove_all(root, error);
}
