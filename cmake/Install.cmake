# `cmake --install <build> --prefix P` installs the tool, the shared library,
# the public headers and a CMake package, so that an out-of-tree backend
# plugin builds with
#   find_package(TaoQuant 0.1 REQUIRED)
#   add_library(mybackend MODULE mybackend.cpp)
#   target_link_libraries(mybackend PRIVATE TaoQuant::taoquant)
# (see docs/extending.md and backends/examples/pot_int8/).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TQ_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/TaoQuant)

install(TARGETS taoquant EXPORT TaoQuantTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/lib/include/taoquant
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(TARGETS tao-quant RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS tao-quant-core RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR})
install(EXPORT TaoQuantTargets NAMESPACE TaoQuant:: FILE TaoQuantTargets.cmake
  DESTINATION ${TQ_INSTALL_CMAKEDIR})

# The plugin ABI version, for consumers (TaoQuant_PLUGIN_ABI_VERSION).
file(STRINGS ${PROJECT_SOURCE_DIR}/lib/include/taoquant/plugin.h _tq_abi_line
  REGEX "^#define TAOQUANT_PLUGIN_ABI_VERSION [0-9]+$")
string(REGEX REPLACE ".* ([0-9]+)$" "\\1" TQ_PLUGIN_ABI_VERSION "${_tq_abi_line}")

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/TaoQuantConfig.cmake.in
  ${PROJECT_BINARY_DIR}/TaoQuantConfig.cmake
  INSTALL_DESTINATION ${TQ_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_BINDIR)
# 0.x: a minor release may change the plugin ABI, so find_package(TaoQuant
# 0.1) accepts 0.1.* only. From 1.0 on this becomes SameMajorVersion.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/TaoQuantConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/TaoQuantConfig.cmake ${PROJECT_BINARY_DIR}/TaoQuantConfigVersion.cmake
  DESTINATION ${TQ_INSTALL_CMAKEDIR})
