# Installs Arclight into a scratch prefix, then configures, builds and runs a consumer project
# that uses find_package(Arclight) and target arc::arclight, together with every C++ block of
# README.md and of the pages under docs/, each a complete program that must build and run to the end.
cmake_minimum_required(VERSION 3.18)
file(REMOVE_RECURSE ${WORK_DIR})
set(PREFIX ${WORK_DIR}/prefix)
set(SNIPPETS ${WORK_DIR}/snippets)

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${WORK_DIR} TIMEOUT 600)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "step failed (${status}): ${ARGN}\n${out}\n${err}")
  endif()
  set(STEP_OUTPUT "${out}" PARENT_SCOPE)
endfunction()

# The ```cpp blocks of `page` (relative to the source folder), in order, as <name>_<n>.cpp, where
# <name> is the page's path with its folders joined by "_" (docs/trainer.md: docs_trainer_1.cpp).
function(extract_blocks page)
  string(REGEX REPLACE "\\.md$" "" name "${page}")
  string(REGEX REPLACE "[/-]" "_" name "${name}")
  string(TOLOWER "${name}" name)
  file(READ ${SOURCE_DIR}/${page} rest)
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
      message(FATAL_ERROR "${page}: C++ block ${count} has no main(): every C++ block must be a complete program, "
                          "which this test builds and runs:\n${code}")
    endif()
    file(WRITE ${SNIPPETS}/${name}_${count}.cpp "${code}")
  endwhile()
endfunction()

file(GLOB_RECURSE pages RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/docs/*.md)
list(SORT pages)
foreach(page README.md ${pages})
  extract_blocks(${page})
endforeach()
file(GLOB snippets RELATIVE ${SNIPPETS} ${SNIPPETS}/*.cpp)
if(NOT snippets)
  message(FATAL_ERROR "found no C++ block in README.md and docs/; the README shows its module as one")
endif()

step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX})
step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${PREFIX}
     -DCMAKE_BUILD_TYPE=Release -DARC_SNIPPETS=${SNIPPETS})
step(${CMAKE_COMMAND} --build ${WORK_DIR}/build -j 2)
step(${WORK_DIR}/build/consumer)
if(NOT STEP_OUTPUT MATCHES "consumer trained: loss [0-9.]+ -> [0-9.]+ decreased")
  message(FATAL_ERROR "the consumer did not train: ${STEP_OUTPUT}")
endif()
message(STATUS "${STEP_OUTPUT}")
# Each program runs in a folder of its own, where it writes what it writes.
foreach(snippet ${snippets})
  string(REGEX REPLACE "\\.cpp$" "" name "${snippet}")
  file(MAKE_DIRECTORY ${WORK_DIR}/run_${name})
  execute_process(COMMAND ${WORK_DIR}/build/${name} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${WORK_DIR}/run_${name} TIMEOUT 300)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "the C++ block ${name} (${snippet} of README.md or docs/) failed (${status}):\n${out}\n${err}")
  endif()
  message(STATUS "C++ block ${name} ran to the end:\n${out}")
endforeach()
