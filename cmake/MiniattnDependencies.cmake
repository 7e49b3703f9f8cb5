# Every third-party package the mini-app uses, found once.
include(${CMAKE_CURRENT_LIST_DIR}/MiniattnKokkos.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/MiniattnOnednn.cmake)

find_package(MPI REQUIRED COMPONENTS C CXX)
# The exchange watch's watchdog thread (src/comm/exchange_watch.cpp).
find_package(Threads REQUIRED)

set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "miniattn needs a parallel (MPI-IO) HDF5; found a serial one at "
                      "${HDF5_INCLUDE_DIRS}. On Debian: apt-get install libhdf5-mpich-dev")
endif()
add_library(miniattn_hdf5 INTERFACE)
target_include_directories(miniattn_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS})
target_link_libraries(miniattn_hdf5 INTERFACE ${HDF5_C_LIBRARIES} MPI::MPI_C)
target_compile_definitions(miniattn_hdf5 INTERFACE ${HDF5_C_DEFINITIONS} ${HDF5_DEFINITIONS})

find_package(yaml-cpp REQUIRED)
if(TARGET yaml-cpp::yaml-cpp)
  set(MINIATTN_YAML_TARGET yaml-cpp::yaml-cpp)
else()
  set(MINIATTN_YAML_TARGET yaml-cpp)
endif()
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
