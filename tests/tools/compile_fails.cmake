# Compiles SOURCE (C++20, tpar's INCLUDE directory, syntax only) and passes where the
# compiler refuses it with at most MAX_ERRORS errors, every one of them in SOURCE (none
# inside tpar's headers), and its output names EXPECT: a malformed policy is refused
# where it is named, not a page from inside tpar. (The errors after the first are the
# compiler's about the refused type's uses in SOURCE.)
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -I${INCLUDE} ${SOURCE}
                RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
string(REGEX MATCHALL "error:" errors "${all}")
list(LENGTH errors n)
if(result EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, and must not")
endif()
if(NOT all MATCHES "${EXPECT}")
  message(FATAL_ERROR "the compiler refused ${SOURCE} without naming ${EXPECT}:\n${all}")
endif()
string(REGEX MATCHALL "[^\n]*error:" located "${all}")
foreach(line IN LISTS located)
  if(line MATCHES "^${INCLUDE}" OR line MATCHES "include/tpar/")
    message(FATAL_ERROR "an error inside tpar's headers, not at the boundary: ${line}\n${all}")
  endif()
endforeach()
if(n GREATER MAX_ERRORS)
  message(FATAL_ERROR "${n} errors (at most ${MAX_ERRORS} wanted):\n${all}")
endif()
message(STATUS "refused with ${n} error(s), naming ${EXPECT}")
