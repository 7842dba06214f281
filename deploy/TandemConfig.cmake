# find_package(Tandem): the C++ client SDK of a Tandem install.
#
#   find_package(Tandem REQUIRED)
#   target_link_libraries(app PRIVATE Tandem::client)   # then #include "client/client.h"
#
# Tandem::client (static, with Tandem::proto and Tandem::base under it)
# links ZeroMQ, protobuf and abseil; they are found here as Tandem's own
# build finds them (its top CMakeLists.txt). <zmq.hpp> (cppzmq) is expected
# on the compiler's default include path, as there.
include(CMakeFindDependencyMacro)
find_dependency(Threads)
find_dependency(Protobuf)
find_dependency(absl)
find_dependency(PkgConfig)
if(NOT TARGET PkgConfig::ZMQ)
  pkg_check_modules(ZMQ QUIET IMPORTED_TARGET libzmq)
  if(NOT TARGET PkgConfig::ZMQ)
    set(Tandem_FOUND FALSE)
    set(Tandem_NOT_FOUND_MESSAGE "Tandem::client needs libzmq, which pkg-config does not find (Debian: libzmq3-dev)")
    return()
  endif()
endif()

include("${CMAKE_CURRENT_LIST_DIR}/TandemTargets.cmake")
