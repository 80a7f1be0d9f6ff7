# Compile settings shared by every Arclight target. All targets keep the compiler's default code
# model (PIE on Debian) so that they can reuse one precompiled <torch/torch.h>.
function(arc_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
endfunction()

# An executable that links Arclight and reuses its precompiled header.
function(arc_add_executable target)
  add_executable(${target} ${ARGN})
  target_link_libraries(${target} PRIVATE arclight)
  arc_target_defaults(${target})
  target_precompile_headers(${target} REUSE_FROM arclight)
endfunction()
