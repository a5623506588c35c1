# Test-only: tests/templates/test_cpp_backend.py configures a rendered cpp-backend project with
# -DCMAKE_PROJECT_INCLUDE=<this file>. Once the project's own CMakeLists.txt has run, the backend library
# (the target whose OUTPUT_NAME starts with triton_) gets count_input_copies.cc, its generated
# TRITONBACKEND_ModelInstanceExecute renamed to CountedModelInstanceExecute (wrapped by that file), and
# every memcpy linked into the library routed through that file's counter.
if(NOT CMAKE_CURRENT_SOURCE_DIR STREQUAL CMAKE_SOURCE_DIR)
  return()  # the project() of one of Triton's repositories
endif()

set(COUNT_INPUT_COPIES_SOURCE "${CMAKE_CURRENT_LIST_DIR}/count_input_copies.cc")

function(count_input_copies)
  get_property(targets DIRECTORY "${CMAKE_SOURCE_DIR}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(output_name ${target} OUTPUT_NAME)
    if(output_name MATCHES "^triton_")
      target_sources(${target} PRIVATE "${COUNT_INPUT_COPIES_SOURCE}")
      target_compile_definitions(
        ${target} PRIVATE TRITONBACKEND_ModelInstanceExecute=CountedModelInstanceExecute)
      target_link_options(${target} PRIVATE -Wl,--wrap=memcpy -Wl,--wrap=__memcpy_chk)
      message(STATUS "count_input_copies: counting the input copies of ${target}")
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "count_input_copies: no target with OUTPUT_NAME triton_* in ${CMAKE_SOURCE_DIR}")
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL count_input_copies)
