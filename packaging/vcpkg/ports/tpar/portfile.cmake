# tpar as a vcpkg overlay port built from this checkout:
#   vcpkg install tpar --overlay-ports=<checkout>/packaging/vcpkg/ports
# (a registry port would fetch a release with vcpkg_from_github instead; the rest is
# the same). Header-only: release only, no libraries, tests and examples off.
set(VCPKG_BUILD_TYPE release)
get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../../../.." ABSOLUTE)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    -DTPAR_BUILD_TESTS=OFF
    -DTPAR_BUILD_EXAMPLES=OFF
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(PACKAGE_NAME tpar CONFIG_PATH share/tpar/cmake)
vcpkg_fixup_pkgconfig()

file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/lib" "${CURRENT_PACKAGES_DIR}/debug")
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/share/doc")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
