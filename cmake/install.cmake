# The installable package (`cmake --install build --prefix P`): the libraries, their headers
# under include/loom (included as in the sources: "lang/schedule.h"), the loom executable, the
# standard schedules and cluster files, and a CMake package, so that a project of your own
# builds with find_package(Loom) and target_link_libraries(app PRIVATE Loom::loom).
# tests/install/install_test.sh builds the examples that way against a temporary prefix.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Loom::loom: everything a program that schedules or trains a model links, the command line
# (cli/entry.h) included.
add_library(loom_package INTERFACE)
set_target_properties(loom_package PROPERTIES EXPORT_NAME loom)
target_link_libraries(loom_package INTERFACE loom_cli)

install(TARGETS loom_core loom_backend_base loom_models loom_backend loom_cli loom_package EXPORT LoomTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom)
install(TARGETS loom RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY lang primitives verifier backend models autotuner cli DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom
        FILES_MATCHING PATTERN "*.h")
set(LOOM_INSTALL_STDLIB ${CMAKE_INSTALL_DATADIR}/loom/stdlib_schedules)
set(LOOM_INSTALL_CLUSTERS ${CMAKE_INSTALL_DATADIR}/loom/clusters)
set(LOOM_INSTALL_EXECUTABLE ${CMAKE_INSTALL_BINDIR}/loom)
install(DIRECTORY stdlib_schedules/ DESTINATION ${LOOM_INSTALL_STDLIB})
install(DIRECTORY clusters/ DESTINATION ${LOOM_INSTALL_CLUSTERS})

set(LOOM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Loom)
install(EXPORT LoomTargets NAMESPACE Loom:: DESTINATION ${LOOM_CMAKE_DIR})
configure_package_config_file(cmake/LoomConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/LoomConfig.cmake
                              INSTALL_DESTINATION ${LOOM_CMAKE_DIR}
                              PATH_VARS LOOM_INSTALL_STDLIB LOOM_INSTALL_CLUSTERS LOOM_INSTALL_EXECUTABLE)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/LoomConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/LoomConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/LoomConfigVersion.cmake
        DESTINATION ${LOOM_CMAKE_DIR})
