# Compile settings shared by every Arclight target.
function(arc_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
endfunction()

# An executable that links Arclight.
function(arc_add_executable target)
  add_executable(${target} ${ARGN})
  target_link_libraries(${target} PRIVATE arclight)
  arc_target_defaults(${target})
endfunction()

# One layer of the library: a static library `target` whose sources see, under <arc/...>, only the
# folders of `FOLDERS` (its own and the layers below it), through an include tree of links to
# them. An include of a folder above the layer is then "No such file or directory", so the build
# enforces the layering. Layers link the layers below them PUBLIC: their trees are subsets of the
# tree of every layer above, so what a layer sees never widens by a link.
function(arc_add_layer target)
  cmake_parse_arguments(ARG "" "" "FOLDERS;SOURCES" ${ARGN})
  set(tree ${ARC_LAYERS_DIR}/${target})
  file(GLOB stale ${tree}/arc/*)
  if(stale)
    file(REMOVE ${stale})
  endif()
  file(MAKE_DIRECTORY ${tree}/arc)
  foreach(folder ${ARG_FOLDERS})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${tree}/arc/${folder} SYMBOLIC)
  endforeach()
  add_library(${target} STATIC ${ARG_SOURCES})
  add_library(arc::${target} ALIAS ${target})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${tree}> $<BUILD_INTERFACE:${ARC_VERSION_INCLUDE_DIR}>
                                              $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  arc_target_defaults(${target})
  set_property(GLOBAL APPEND PROPERTY ARC_LAYERS ${target})
  set_property(GLOBAL PROPERTY ARC_LAYER_FOLDERS_${target} ${ARG_FOLDERS})
endfunction()
