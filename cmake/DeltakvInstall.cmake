# `cmake --install`: libdeltakv.so, the C headers, the deltakv tool and the reference engine,
# deltakv.pc, and a CMake package (find_package(deltakv) gives the target deltakv::deltakv).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS deltakv_shared EXPORT deltakvTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/shim/include/deltakv
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(TARGETS deltakv deltakv-demo-engine RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# deltakv.pc finds the prefix from its own place (${pcfiledir}), so `cmake --install --prefix`
# anywhere gives a working file.
string(REGEX REPLACE "[^/]+" ".." DELTAKV_PC_UP "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
configure_file(${PROJECT_SOURCE_DIR}/cmake/deltakv.pc.in ${PROJECT_BINARY_DIR}/deltakv.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/deltakv.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(EXPORT deltakvTargets NAMESPACE deltakv:: FILE deltakvTargets.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/deltakv)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/deltakvConfig.cmake.in
  ${PROJECT_BINARY_DIR}/deltakvConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/deltakv)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/deltakvConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/deltakvConfig.cmake ${PROJECT_BINARY_DIR}/deltakvConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/deltakv)
