# Builds the CMake project SOURCE_DIR in WORK_DIR (OPTIONS: extra -D flags, ;-list) and
# runs its tests: ctest --build-and-test, nothing fetched.
file(REMOVE_RECURSE "${WORK_DIR}")
execute_process(COMMAND "${CTEST_COMMAND}" --build-and-test "${SOURCE_DIR}" "${WORK_DIR}"
                        --build-generator "${GENERATOR}"
                        --build-options "-DCMAKE_CXX_COMPILER=${CXX}" ${OPTIONS}
                        --test-command "${CTEST_COMMAND}" --output-on-failure
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "${SOURCE_DIR} failed (${rc})")
endif()
