# Finds Arclight's dependencies: Debian 12 packages, or a LibTorch 2.x prefix given through
# CMAKE_PREFIX_PATH. Also run by the installed ArclightConfig.cmake for consumers.
include(CMakeFindDependencyMacro)

find_dependency(Torch)
find_dependency(nlohmann_json 3.2)
find_dependency(yaml-cpp)
find_dependency(spdlog)
find_dependency(Threads)
find_dependency(Protobuf)
