# Install rules and the exported package: find_package(Arclight) gives arc::arclight.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ARC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Arclight)

# Public headers only: internals (loops, connectors, shared memory) live in detail/ folders.
foreach(dir base data accelerators strategies metrics loggers core fabric callbacks profilers cli)
  install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/arc/${dir}
          FILES_MATCHING PATTERN "*.h" PATTERN "detail" EXCLUDE)
endforeach()
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/arc.h ${ARC_VERSION_INCLUDE_DIR}/arc/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/arc)

# arc::arclight and the layers it links (each exported as arc::<layer>).
get_property(ARC_LAYER_TARGETS GLOBAL PROPERTY ARC_LAYERS)
install(TARGETS arclight ${ARC_LAYER_TARGETS} arc_deps EXPORT ArclightTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The `arc` tool: its launcher and the engine it starts from the same folder.
if(TARGET arc)
  install(TARGETS arc arc_engine RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT ArclightTargets NAMESPACE arc:: DESTINATION ${ARC_CMAKE_DIR})

configure_package_config_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/ArclightConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/ArclightConfig.cmake
                              INSTALL_DESTINATION ${ARC_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/ArclightConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ArclightConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/ArclightConfigVersion.cmake
              ${CMAKE_CURRENT_SOURCE_DIR}/cmake/ArclightDependencies.cmake
        DESTINATION ${ARC_CMAKE_DIR})
