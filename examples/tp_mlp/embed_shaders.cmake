# tp-mlp's shaders (shaders/*.comp) -> C++ headers in spirv/ holding their SPIR-V as an
# array of words, or a check that the committed headers are what the local glslc makes
# of the sources now. Run with cmake -P; arguments come as -D definitions:
#
#   cmake -DGLSLC=<glslc> [-DSPIRV_VAL=<spirv-val>] -DSOURCE_DIR=<examples/tp_mlp>
#         -DNAMES=matmul_tiled,matmul_skinny [-DMODE=check -DOUT_DIR=<scratch>]
#         -P embed_shaders.cmake
#
# MODE embed (the default) rewrites SOURCE_DIR/spirv/<name>.hpp where its content
# changes. MODE check writes fresh headers to OUT_DIR and fails when a committed one
# differs; when the glslc recorded in a committed header is not the local one it prints
# "tp-mlp-spirv-check: SKIPPED" instead (different compilers emit different words for
# the same source). Same flags as tpar's own shaders (cmake/embed_spirv.cmake).

cmake_minimum_required(VERSION 3.21)

set(_flags -O --target-env=vulkan1.2 -fshader-stage=compute)
foreach(var GLSLC SOURCE_DIR NAMES)
  if(NOT ${var})
    message(FATAL_ERROR "embed_shaders.cmake: ${var} is required")
  endif()
endforeach()
if(NOT MODE)
  set(MODE embed)
endif()
string(REPLACE "," ";" _names "${NAMES}")

execute_process(COMMAND "${GLSLC}" --version OUTPUT_VARIABLE _out RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "`${GLSLC} --version` failed")
endif()
string(REGEX REPLACE "\r?\n.*$" "" _version "${_out}")
string(STRIP "${_version}" _version)

# Writes the header for shaders/<name>.comp to `output`.
function(_embed name output)
  set(input "${SOURCE_DIR}/shaders/${name}.comp")
  set(tmp "${output}.tmp")
  get_filename_component(dir "${output}" DIRECTORY)
  file(MAKE_DIRECTORY "${dir}")
  execute_process(COMMAND "${GLSLC}" ${_flags} "-I${SOURCE_DIR}/shaders" -o "${tmp}.spv" "${input}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "glslc failed on ${input}:\n${out}${err}")
  endif()
  if(SPIRV_VAL)
    execute_process(COMMAND "${SPIRV_VAL}" --target-env vulkan1.2 "${tmp}.spv"
      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      file(REMOVE "${tmp}.spv")
      message(FATAL_ERROR "spirv-val rejects ${input}:\n${out}${err}")
    endif()
  endif()
  file(REMOVE "${tmp}.spv")
  execute_process(COMMAND "${GLSLC}" ${_flags} "-I${SOURCE_DIR}/shaders" -mfmt=num -o "${tmp}.num" "${input}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "glslc failed on ${input}:\n${out}${err}")
  endif()
  file(READ "${tmp}.num" numbers)
  file(REMOVE "${tmp}.num")
  string(REGEX MATCHALL "0x[0-9a-fA-F]+" words "${numbers}")
  list(LENGTH words nwords)
  list(GET words 0 magic)
  string(TOLOWER "${magic}" magic)
  if(NOT magic STREQUAL "0x07230203")
    message(FATAL_ERROR "glslc output for ${input} is not SPIR-V")
  endif()
  set(body "")
  set(line "")
  set(on_line 0)
  foreach(word IN LISTS words)
    string(TOLOWER "${word}" word)
    string(APPEND line " ${word},")
    math(EXPR on_line "${on_line} + 1")
    if(on_line EQUAL 8)
      string(APPEND body "   ${line}\n")
      set(line "")
      set(on_line 0)
    endif()
  endforeach()
  if(on_line GREATER 0)
    string(APPEND body "   ${line}\n")
  endif()
  string(JOIN " " flags ${_flags})
  set(text "// Generated from examples/tp_mlp/shaders/${name}.comp by glslc: DO NOT EDIT.
// glslc: ${_version}
// Flags: ${flags}
// Regenerate with `cmake --build <build-dir> --target tp_mlp_shaders`
// (the ctest tp-mlp/spirv_up_to_date checks it was).
#pragma once

#include <cstdint>

namespace tp_mlp::spirv {

// SPIR-V for the Vulkan 1.2 environment, ${nwords} words.
inline constexpr std::uint32_t ${name}[] = {
${body}};

}  // namespace tp_mlp::spirv
")
  set(old "")
  if(EXISTS "${output}")
    file(READ "${output}" old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE "${output}" "${text}")
  endif()
endfunction()

if(MODE STREQUAL "embed")
  foreach(name IN LISTS _names)
    _embed(${name} "${SOURCE_DIR}/spirv/${name}.hpp")
  endforeach()
elseif(MODE STREQUAL "check")
  if(NOT OUT_DIR)
    message(FATAL_ERROR "embed_shaders.cmake: OUT_DIR is required in check mode")
  endif()
  set(stale "")
  foreach(name IN LISTS _names)
    set(committed "${SOURCE_DIR}/spirv/${name}.hpp")
    if(EXISTS "${committed}")
      file(STRINGS "${committed}" recorded REGEX "^// glslc: " LIMIT_COUNT 1)
      string(REGEX REPLACE "^// glslc: " "" recorded "${recorded}")
      string(STRIP "${recorded}" recorded)
      if(recorded AND NOT recorded STREQUAL _version)
        message("tp-mlp-spirv-check: SKIPPED: spirv/${name}.hpp was made by glslc '${recorded}', "
          "the local one is '${_version}'")
        return()
      endif()
    endif()
    _embed(${name} "${OUT_DIR}/${name}.hpp")
    file(READ "${OUT_DIR}/${name}.hpp" fresh)
    set(old "")
    if(EXISTS "${committed}")
      file(READ "${committed}" old)
    endif()
    if(NOT old STREQUAL fresh)
      list(APPEND stale "examples/tp_mlp/spirv/${name}.hpp")
    endif()
  endforeach()
  if(stale)
    list(JOIN stale ", " stale)
    message(FATAL_ERROR "stale SPIR-V headers: ${stale} (fresh copies in ${OUT_DIR}); "
      "run `cmake --build <build-dir> --target tp_mlp_shaders` and commit the result")
  endif()
  message("tp-mlp SPIR-V headers match shaders/ (glslc '${_version}')")
else()
  message(FATAL_ERROR "embed_shaders.cmake: unknown MODE '${MODE}' (embed or check)")
endif()
