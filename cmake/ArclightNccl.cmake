# Finds NCCL for c10d's NCCL process group: its header includes <nccl.h>, which LibTorch does not
# ship. Looked for under NCCL_HOME, the CUDA toolkit, the given folders and, for the LibTorch of a
# pip-installed PyTorch, the NVIDIA wheels beside it (site-packages/nvidia/*, e.g. nvidia-nccl).
#   arc_find_nccl(<include dir variable> <library variable> [folders to look in...])
function(arc_find_nccl include_variable library_variable)
  set(roots $ENV{NCCL_HOME} $ENV{CUDA_HOME} /usr/local/cuda ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_DIR} ${ARGN})
  if(Torch_DIR)
    get_filename_component(site_packages "${Torch_DIR}/../../../.." ABSOLUTE)
    file(GLOB wheels LIST_DIRECTORIES true "${site_packages}/nvidia/*")
    list(APPEND roots ${wheels})
  endif()
  find_path(${include_variable} nccl.h HINTS ${roots} PATH_SUFFIXES include)
  find_library(${library_variable} NAMES nccl libnccl.so.2 HINTS ${roots} PATH_SUFFIXES lib lib64)
endfunction()
