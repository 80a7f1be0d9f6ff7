# Installs Arclight into a scratch prefix, then configures, builds and runs a consumer project
# that uses find_package(Arclight) and target arc::arclight, together with every C++ block of the
# README, each a complete program that must build and run to the end.
cmake_minimum_required(VERSION 3.18)
file(REMOVE_RECURSE ${WORK_DIR})
set(PREFIX ${WORK_DIR}/prefix)
set(SNIPPETS ${WORK_DIR}/readme)

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${WORK_DIR} TIMEOUT 600)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "step failed (${status}): ${ARGN}\n${out}\n${err}")
  endif()
  set(STEP_OUTPUT "${out}" PARENT_SCOPE)
endfunction()

# The README's ```cpp blocks, in order, as readme_<n>.cpp.
file(READ ${SOURCE_DIR}/README.md rest)
set(count 0)
while(TRUE)
  string(FIND "${rest}" "```cpp\n" start)
  if(start EQUAL -1)
    break()
  endif()
  math(EXPR start "${start} + 7")
  string(SUBSTRING "${rest}" ${start} -1 rest)
  string(FIND "${rest}" "```" length)
  string(SUBSTRING "${rest}" 0 ${length} code)
  string(SUBSTRING "${rest}" ${length} -1 rest)
  math(EXPR count "${count} + 1")
  if(NOT code MATCHES "int main\\(")
    message(FATAL_ERROR "README C++ block ${count} has no main(): every C++ block must be a complete program, "
                        "which this test builds and runs:\n${code}")
  endif()
  file(WRITE ${SNIPPETS}/readme_${count}.cpp "${code}")
endwhile()
if(count LESS 2)
  message(FATAL_ERROR "found ${count} C++ blocks in README.md, expected the module and the arc::Accelerator loop")
endif()

step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX})
step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${PREFIX}
     -DCMAKE_BUILD_TYPE=Release -DARC_README_SNIPPETS=${SNIPPETS})
step(${CMAKE_COMMAND} --build ${WORK_DIR}/build -j 2)
step(${WORK_DIR}/build/consumer)
if(NOT STEP_OUTPUT MATCHES "consumer trained: loss [0-9.]+ -> [0-9.]+ decreased")
  message(FATAL_ERROR "the consumer did not train: ${STEP_OUTPUT}")
endif()
message(STATUS "${STEP_OUTPUT}")
foreach(n RANGE 1 ${count})
  step(${WORK_DIR}/build/readme_${n})
  message(STATUS "README C++ block ${n} ran to the end:\n${STEP_OUTPUT}")
endforeach()
