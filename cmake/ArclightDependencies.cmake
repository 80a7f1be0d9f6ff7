# Finds Arclight's dependencies: Debian 12 packages, or a LibTorch 2.x prefix given through
# CMAKE_PREFIX_PATH. Also run by the installed ArclightConfig.cmake for consumers.
include(CMakeFindDependencyMacro)

# Protobuf before Torch: a pip PyTorch's Caffe2Config defines protobuf::libprotobuf as an empty
# placeholder target when none exists yet, which would hide the real library and break the export.
find_dependency(Protobuf)
find_dependency(Torch)
find_dependency(nlohmann_json 3.2)
find_dependency(yaml-cpp)
find_dependency(spdlog)
find_dependency(Threads)
