# tpar's compute shaders (shaders/*.comp) ship precompiled: include/tpar/detail/spirv/
# holds one generated header per shader, so building tpar or its users needs no shader
# compiler. This file, included by the top-level CMakeLists.txt after
# find_package(Vulkan), provides where glslc is found:
#
#   tpar_shaders                 custom target (not in ALL) that regenerates the headers
#                                in the source tree: cmake --build <dir> --target tpar_shaders
#   tpar_add_spirv_check_test()  registers the ctest spirv_headers_up_to_date, which
#                                regenerates the headers into the build tree and fails
#                                when they differ from the committed ones (it is skipped
#                                when the local glslc is not the one that made them).
#                                Without glslc it registers nothing.

set(TPAR_SHADER_NAMES pack combine oneshot relay relay_clock)
set_property(GLOBAL PROPERTY TPAR_SHADER_NAMES ${TPAR_SHADER_NAMES})

set(_tpar_shader_root "${CMAKE_CURRENT_LIST_DIR}/..")
cmake_path(NORMAL_PATH _tpar_shader_root)
string(REGEX REPLACE "/$" "" _tpar_shader_root "${_tpar_shader_root}")
set_property(GLOBAL PROPERTY TPAR_SHADER_ROOT "${_tpar_shader_root}")

# glslc: FindVulkan's (CMake 3.19+) when it found one, else one on the PATH or in the SDK.
if(Vulkan_GLSLC_EXECUTABLE)
  set(_tpar_glslc "${Vulkan_GLSLC_EXECUTABLE}")
else()
  find_program(TPAR_GLSLC NAMES glslc HINTS "$ENV{VULKAN_SDK}/bin" "$ENV{VULKAN_SDK}/Bin"
    DOC "glslc used to regenerate tpar's SPIR-V headers")
  mark_as_advanced(TPAR_GLSLC)
  set(_tpar_glslc "${TPAR_GLSLC}")
  if(NOT _tpar_glslc)
    set(_tpar_glslc "")
  endif()
endif()
find_program(TPAR_SPIRV_VAL NAMES spirv-val HINTS "$ENV{VULKAN_SDK}/bin" "$ENV{VULKAN_SDK}/Bin"
  DOC "spirv-val used to validate tpar's SPIR-V (optional)")
mark_as_advanced(TPAR_SPIRV_VAL)
set(_tpar_spirv_val "")
if(TPAR_SPIRV_VAL)
  set(_tpar_spirv_val "${TPAR_SPIRV_VAL}")
endif()
set_property(GLOBAL PROPERTY TPAR_GLSLC "${_tpar_glslc}")
set_property(GLOBAL PROPERTY TPAR_SPIRV_VAL "${_tpar_spirv_val}")

if(_tpar_glslc)
  set(_tpar_embed_script "${_tpar_shader_root}/cmake/embed_spirv.cmake")
  set(_tpar_spirv_val_arg "")
  if(_tpar_spirv_val)
    set(_tpar_spirv_val_arg "-DSPIRV_VAL=${_tpar_spirv_val}")
  endif()

  set(_tpar_shader_commands "")
  set(_tpar_shader_sources "")
  foreach(_tpar_name IN LISTS TPAR_SHADER_NAMES)
    list(APPEND _tpar_shader_sources "${_tpar_shader_root}/shaders/${_tpar_name}.comp")
    list(APPEND _tpar_shader_commands
      COMMAND "${CMAKE_COMMAND}"
        "-DGLSLC=${_tpar_glslc}" ${_tpar_spirv_val_arg}
        "-DINPUT=${_tpar_shader_root}/shaders/${_tpar_name}.comp"
        "-DOUTPUT=${_tpar_shader_root}/include/tpar/detail/spirv/${_tpar_name}.hpp"
        "-DNAME=${_tpar_name}"
        "-DINCLUDE_DIR=${_tpar_shader_root}/shaders"
        -P "${_tpar_embed_script}")
  endforeach()
  file(GLOB _tpar_shader_includes CONFIGURE_DEPENDS "${_tpar_shader_root}/shaders/*.glsl")

  add_custom_target(tpar_shaders
    ${_tpar_shader_commands}
    COMMENT "Regenerating include/tpar/detail/spirv/*.hpp from shaders/"
    SOURCES ${_tpar_shader_sources} ${_tpar_shader_includes}
    VERBATIM)
  message(STATUS "tpar: glslc found (${_tpar_glslc}); target tpar_shaders regenerates the SPIR-V headers")
else()
  message(STATUS "tpar: glslc not found; the committed SPIR-V headers are used as they are")
endif()

function(tpar_add_spirv_check_test)
  get_property(glslc GLOBAL PROPERTY TPAR_GLSLC)
  get_property(spirv_val GLOBAL PROPERTY TPAR_SPIRV_VAL)
  if(NOT glslc)
    message(STATUS "tpar: glslc not found; test spirv_headers_up_to_date is not registered")
    return()
  endif()
  get_property(root GLOBAL PROPERTY TPAR_SHADER_ROOT)
  set(spirv_val_arg "")
  if(spirv_val)
    set(spirv_val_arg "-DSPIRV_VAL=${spirv_val}")
  endif()
  get_property(shader_names GLOBAL PROPERTY TPAR_SHADER_NAMES)
  string(JOIN "," names ${shader_names})
  add_test(NAME spirv_headers_up_to_date
    COMMAND "${CMAKE_COMMAND}" -DMODE=check
      "-DGLSLC=${glslc}" ${spirv_val_arg}
      "-DSHADER_DIR=${root}/shaders"
      "-DHEADER_DIR=${root}/include/tpar/detail/spirv"
      "-DOUT_DIR=${CMAKE_CURRENT_BINARY_DIR}/spirv_check"
      "-DNAMES=${names}"
      "-DBUILD_DIR=${CMAKE_BINARY_DIR}"
      -P "${root}/cmake/embed_spirv.cmake")
  # cmake -P can only exit with a chosen code from CMake 3.29 on (cmake_language(EXIT));
  # older ones print the marker line instead.
  set_tests_properties(spirv_headers_up_to_date PROPERTIES
    SKIP_RETURN_CODE 77
    SKIP_REGULAR_EXPRESSION "tpar-spirv-check: SKIPPED"
    LABELS "shaders")
endfunction()
