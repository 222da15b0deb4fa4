# Compiles compute shaders to SPIR-V and writes them as C++ headers (an array of words),
# or checks that committed headers match what the local glslc makes of the sources.
# Run with cmake -P; arguments come as -D definitions.
#
# Embed one shader (the default mode):
#   cmake -DGLSLC=<glslc> [-DSPIRV_VAL=<spirv-val>] -DINPUT=<dir>/shaders/<name>.comp
#         -DOUTPUT=<header> -DNAME=<C++ name> [-DINCLUDE_DIR=<dir>/shaders]
#         -P embed_spirv.cmake
#   The header is only rewritten when its content changes.
#
# Check committed headers (the ctest spirv_headers_up_to_date):
#   cmake -DMODE=check -DGLSLC=<glslc> [-DSPIRV_VAL=<spirv-val>] -DSHADER_DIR=<dir>/shaders
#         -DHEADER_DIR=<dir>/include/tpar/detail/spirv -DOUT_DIR=<scratch dir>
#         -DNAMES=pack,combine,oneshot [-DBUILD_DIR=<build dir>] -P embed_spirv.cmake
#   Regenerates every header into OUT_DIR and compares it byte for byte with the one in
#   HEADER_DIR. When the glslc recorded in a committed header is not the local one, the
#   output cannot be expected to match: the check is skipped (exit code 77 where this
#   CMake can say so, and the line "tpar-spirv-check: SKIPPED" in any case).
#
# Both modes serve other shader sets too (examples/tp_mlp uses it for its own); what the
# header says of itself then comes from these, each with tpar's own as the default:
#   -DNAMESPACE=<C++ namespace of the arrays>    tpar::inline v0::detail::spirv
#   -DSOURCE_LABEL=<the sources' directory, as printed>        shaders
#   -DHEADER_LABEL=<the headers' directory, as printed>        include/tpar/detail/spirv
#   -DREGEN_TARGET=<the target that regenerates them>          tpar_shaders
#   -DCHECK_TEST=<the ctest that checks them>                  spirv_headers_up_to_date

cmake_minimum_required(VERSION 3.21)

set(_tpar_glslc_flags -O --target-env=vulkan1.2 -fshader-stage=compute)
set(_tpar_skip_marker "tpar-spirv-check: SKIPPED")
foreach(pair "NAMESPACE=tpar::inline v0::detail::spirv" "SOURCE_LABEL=shaders"
             "HEADER_LABEL=include/tpar/detail/spirv" "REGEN_TARGET=tpar_shaders"
             "CHECK_TEST=spirv_headers_up_to_date")
  string(FIND "${pair}" "=" eq)
  string(SUBSTRING "${pair}" 0 ${eq} var)
  math(EXPR eq "${eq} + 1")
  string(SUBSTRING "${pair}" ${eq} -1 default)
  if(NOT ${var})
    set(${var} "${default}")
  endif()
endforeach()

if(NOT GLSLC)
  message(FATAL_ERROR "embed_spirv.cmake: GLSLC (the glslc executable) is required")
endif()

# First line of `glslc --version`, e.g. "shaderc 2023.2-1".
function(_tpar_glslc_version out_var)
  execute_process(COMMAND "${GLSLC}" --version
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "embed_spirv.cmake: `${GLSLC} --version` failed (${rc}): ${err}")
  endif()
  string(REGEX REPLACE "\r?\n.*$" "" line "${out}")
  string(STRIP "${line}" line)
  set(${out_var} "${line}" PARENT_SCOPE)
endfunction()

# The glslc version line recorded in a generated header, or "" when there is none.
function(_tpar_recorded_version header out_var)
  set(line "")
  if(EXISTS "${header}")
    file(STRINGS "${header}" lines REGEX "^// glslc: " LIMIT_COUNT 1)
    if(lines)
      list(GET lines 0 line)
      string(REGEX REPLACE "^// glslc: " "" line "${line}")
      string(STRIP "${line}" line)
    endif()
  endif()
  set(${out_var} "${line}" PARENT_SCOPE)
endfunction()

# Compiles `input` and writes the header for array `name` to `output`.
function(_tpar_embed input output name include_dir version)
  get_filename_component(source_name "${input}" NAME)
  get_filename_component(out_dir "${output}" DIRECTORY)
  file(MAKE_DIRECTORY "${out_dir}")
  set(tmp_base "${output}.tmp")
  set(include_args "")
  if(include_dir)
    set(include_args "-I${include_dir}")
  endif()

  # Binary first, for spirv-val, then the same module as numbers for the header.
  execute_process(
    COMMAND "${GLSLC}" ${_tpar_glslc_flags} ${include_args} -o "${tmp_base}.spv" "${input}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "glslc failed on ${input}:\n${out}${err}")
  endif()
  if(SPIRV_VAL)
    execute_process(
      COMMAND "${SPIRV_VAL}" --target-env vulkan1.2 "${tmp_base}.spv"
      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      file(REMOVE "${tmp_base}.spv")
      message(FATAL_ERROR "spirv-val rejects ${input}:\n${out}${err}")
    endif()
  endif()
  execute_process(
    COMMAND "${GLSLC}" ${_tpar_glslc_flags} ${include_args} -mfmt=num -o "${tmp_base}.num" "${input}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  file(REMOVE "${tmp_base}.spv")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "glslc failed on ${input}:\n${out}${err}")
  endif()
  file(READ "${tmp_base}.num" numbers)
  file(REMOVE "${tmp_base}.num")

  string(REGEX MATCHALL "0x[0-9a-fA-F]+" words "${numbers}")
  list(LENGTH words nwords)
  if(nwords LESS 5)
    message(FATAL_ERROR "glslc produced no SPIR-V for ${input}")
  endif()
  list(GET words 0 magic)
  string(TOLOWER "${magic}" magic)
  if(NOT magic STREQUAL "0x07230203")
    message(FATAL_ERROR "glslc output for ${input} is not SPIR-V (first word ${magic})")
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

  string(JOIN " " flags ${_tpar_glslc_flags})
  set(text "// Generated from ${SOURCE_LABEL}/${source_name} by glslc: DO NOT EDIT.
// glslc: ${version}
// Flags: ${flags}
// Regenerate with `cmake --build <build-dir> --target ${REGEN_TARGET}`
// (the ctest ${CHECK_TEST} checks it was).
#pragma once

#include <cstdint>

namespace ${NAMESPACE} {

// SPIR-V for the Vulkan 1.2 environment, ${nwords} words.
inline constexpr std::uint32_t ${name}[] = {
${body}};

}  // namespace ${NAMESPACE}
")

  set(old "")
  if(EXISTS "${output}")
    file(READ "${output}" old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE "${output}" "${text}")
  endif()
endfunction()

if(NOT DEFINED MODE OR MODE STREQUAL "embed")
  foreach(var INPUT OUTPUT NAME)
    if(NOT ${var})
      message(FATAL_ERROR "embed_spirv.cmake: ${var} is required")
    endif()
  endforeach()
  _tpar_glslc_version(version)
  _tpar_embed("${INPUT}" "${OUTPUT}" "${NAME}" "${INCLUDE_DIR}" "${version}")

elseif(MODE STREQUAL "check")
  foreach(var SHADER_DIR HEADER_DIR OUT_DIR NAMES)
    if(NOT ${var})
      message(FATAL_ERROR "embed_spirv.cmake: ${var} is required in check mode")
    endif()
  endforeach()
  string(REPLACE "," ";" names "${NAMES}")
  if(NOT BUILD_DIR)
    set(BUILD_DIR "<build-dir>")
  endif()
  _tpar_glslc_version(version)

  foreach(name IN LISTS names)
    _tpar_recorded_version("${HEADER_DIR}/${name}.hpp" recorded)
    if(recorded AND NOT recorded STREQUAL version)
      message("${_tpar_skip_marker}: ${HEADER_LABEL}/${name}.hpp was generated by "
        "glslc '${recorded}', but the local glslc is '${version}'; its SPIR-V may differ "
        "without the shader sources having changed, so the committed headers are not checked.")
      if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.29)
        cmake_language(EXIT 77)
      endif()
      return()
    endif()
  endforeach()

  set(stale "")
  foreach(name IN LISTS names)
    set(generated "${OUT_DIR}/${name}.hpp")
    _tpar_embed("${SHADER_DIR}/${name}.comp" "${generated}" "${name}" "${SHADER_DIR}" "${version}")
    set(committed "${HEADER_DIR}/${name}.hpp")
    set(committed_text "")
    if(EXISTS "${committed}")
      file(READ "${committed}" committed_text)
    endif()
    file(READ "${generated}" generated_text)
    if(NOT committed_text STREQUAL generated_text)
      list(APPEND stale "${HEADER_LABEL}/${name}.hpp")
    endif()
  endforeach()
  if(stale)
    list(JOIN stale ", " stale)
    message(FATAL_ERROR "The committed SPIR-V headers are out of date: ${stale} "
      "not what glslc '${version}' makes of ${SOURCE_LABEL}/ now (fresh copies are in ${OUT_DIR}). "
      "Run `cmake --build ${BUILD_DIR} --target ${REGEN_TARGET}` and commit the result.")
  endif()
  message("SPIR-V headers match ${SOURCE_LABEL}/ (${NAMES}, glslc '${version}').")

else()
  message(FATAL_ERROR "embed_spirv.cmake: unknown MODE '${MODE}' (embed or check)")
endif()
