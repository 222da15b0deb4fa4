"""Conan 2 recipe for tpar, a header-only C++20 library (run from a checkout):

    conan create packaging/conan --build=missing
"""
import os

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import copy

required_conan_version = ">=2.0"


class TparConan(ConanFile):
    name = "tpar"
    version = "0.1.0"
    description = ("Cross-device AllReduce for Vulkan: header-only C++20 (Vulkan-Hpp), "
                   "for tensor-parallel inference across GPUs of any vendor")
    license = "MIT"
    topics = ("vulkan", "allreduce", "tensor-parallel", "gpu", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    no_copy_source = True

    def export_sources(self):
        root = os.path.join(self.recipe_folder, "..", "..")
        for pattern in ("CMakeLists.txt", "LICENSE", "cmake/*", "include/*", "shaders/*"):
            copy(self, pattern, root, self.export_sources_folder)

    def layout(self):
        cmake_layout(self)

    def requirements(self):
        self.requires("vulkan-headers/[>=1.3.239]")

    def validate(self):
        check_min_cppstd(self, 20)

    def package_id(self):
        self.info.clear()

    def generate(self):
        toolchain = CMakeToolchain(self)
        toolchain.cache_variables["TPAR_BUILD_TESTS"] = False
        toolchain.cache_variables["TPAR_BUILD_EXAMPLES"] = False
        toolchain.generate()

    def package(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.install()

    def package_info(self):
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        self.cpp_info.set_property("cmake_file_name", "tpar")
        self.cpp_info.set_property("cmake_target_name", "tpar::tpar")
        self.cpp_info.set_property("pkg_config_name", "tpar")
        self.cpp_info.requires = ["vulkan-headers::vulkan-headers"]
        if self.settings.os in ("Linux", "FreeBSD"):
            self.cpp_info.system_libs = ["pthread", "dl"]
