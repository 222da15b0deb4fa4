# Installs the tpar build at BUILD_DIR into PREFIX, then builds and runs the consumer
# project in SOURCE_DIR against it with find_package (no network, nothing else).
file(REMOVE_RECURSE "${PREFIX}" "${WORK_DIR}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}" RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
if(NOT EXISTS "${PREFIX}/share/tpar/cmake/tparConfig.cmake" OR NOT EXISTS "${PREFIX}/include/tpar/tpar.hpp")
  message(FATAL_ERROR "the install tree lacks tparConfig.cmake or the headers")
endif()
execute_process(COMMAND "${CTEST_COMMAND}" --build-and-test "${SOURCE_DIR}" "${WORK_DIR}"
                        --build-generator "${GENERATOR}"
                        --build-options "-DCMAKE_PREFIX_PATH=${PREFIX}" "-DCMAKE_CXX_COMPILER=${CXX}"
                        --test-command "${CTEST_COMMAND}" --output-on-failure
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the consumer project failed (${rc})")
endif()
