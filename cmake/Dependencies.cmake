# All third-party packages come from Debian (see scripts/setup.sh).
find_package(Torch REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(spdlog REQUIRED)
# Debian's libopencv-{imgcodecs,imgproc}-dev ship no CMake/pkg-config files.
find_path(TQ_OPENCV_INCLUDE opencv2/imgcodecs.hpp PATH_SUFFIXES opencv4 REQUIRED)
foreach(_m core imgcodecs imgproc)
  find_library(TQ_OPENCV_${_m} opencv_${_m} REQUIRED)
  add_library(tq_opencv_${_m} UNKNOWN IMPORTED)
  set_target_properties(tq_opencv_${_m} PROPERTIES IMPORTED_LOCATION ${TQ_OPENCV_${_m}}
    INTERFACE_INCLUDE_DIRECTORIES ${TQ_OPENCV_INCLUDE})
endforeach()
# Header-only Mustache (libkainjow-mustache-dev) renders the HTML reports.
find_path(TQ_MUSTACHE_INCLUDE kainjow/mustache.hpp REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBZIP REQUIRED IMPORTED_TARGET libzip)
if(TQ_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
endif()

# LibTorch's exported flags (ABI define etc.) without its -Wno noise on our code.
add_library(tq_torch INTERFACE)
target_link_libraries(tq_torch INTERFACE torch)
# libyaml (Debian libyaml-dev): the C YAML parser PyYAML uses; specs and
# manifests are read with it so that they follow PyYAML's grammar.
pkg_check_modules(LIBYAML REQUIRED IMPORTED_TARGET yaml-0.1)
set(TQ_YAML_TARGET PkgConfig::LIBYAML)

# Targets with many LibTorch translation units precompile <torch/script.h>.
function(tq_torch_pch target)
  if(TQ_PCH)
    target_precompile_headers(${target} PRIVATE <torch/script.h>)
  endif()
endfunction()

# ONNX (Debian libonnx-dev 1.12: the ML build's protobuf types, the checker
# and shape inference) for the exporters. Its targets need protobuf's.
find_package(Protobuf REQUIRED)
find_package(ONNX REQUIRED)
