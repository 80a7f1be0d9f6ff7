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
