# Test-only: tests/templates/test_cpp_backend.py configures a rendered C++ backend project with
# -DCMAKE_PROJECT_INCLUDE=<this file>. Once the project's own CMakeLists.txt has run, the backend library
# (the target whose OUTPUT_NAME starts with triton_) gets probe_readiness.cc, its generated
# TRITONBACKEND_ModelInstanceExecute renamed to ProbedModelInstanceExecute (wrapped by that file).
if(NOT CMAKE_CURRENT_SOURCE_DIR STREQUAL CMAKE_SOURCE_DIR)
  return()  # the project() of one of Triton's repositories
endif()

set(PROBE_READINESS_SOURCE "${CMAKE_CURRENT_LIST_DIR}/probe_readiness.cc")

function(probe_readiness)
  get_property(targets DIRECTORY "${CMAKE_SOURCE_DIR}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(output_name ${target} OUTPUT_NAME)
    if(output_name MATCHES "^triton_")
      target_sources(${target} PRIVATE "${PROBE_READINESS_SOURCE}")
      target_compile_definitions(
        ${target} PRIVATE TRITONBACKEND_ModelInstanceExecute=ProbedModelInstanceExecute)
      message(STATUS "probe_readiness: probing the readiness of ${target}'s instances")
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "probe_readiness: no target with OUTPUT_NAME triton_* in ${CMAKE_SOURCE_DIR}")
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL probe_readiness)
