# Runs at install time (included by deploy/CMakeLists.txt's install(CODE)):
# CMAKE_INSTALL_PREFIX is the final prefix and file(INSTALL) honours
# DESTDIR, so the configured files name the installed paths.
# With the prefix /usr (the .deb) the config goes to /etc/tandem, else to
# PREFIX/etc/tandem; an existing config is never overwritten.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(TANDEM_SYSCONFDIR "/etc")
else()
  set(TANDEM_SYSCONFDIR "${CMAKE_INSTALL_PREFIX}/etc")
endif()
set(TANDEM_BINDIR "${CMAKE_INSTALL_PREFIX}/bin")
set(TANDEM_LIBDIR "${CMAKE_INSTALL_PREFIX}/lib")
set(TANDEM_INCLUDEDIR "${CMAKE_INSTALL_PREFIX}/include")
set(TANDEM_DOCDIR "${CMAKE_INSTALL_PREFIX}/share/doc/tandem")
# One staging folder per destination, so that installs to several places
# (a test's prefix, CPack's staging) never share files.
string(MD5 destination "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}")
set(staging "${TANDEM_BINARY_DIR}/deploy/configured/${destination}")

foreach(unit tandemd.service tandemd@.service)
  configure_file("${TANDEM_SOURCE_DIR}/deploy/systemd/${unit}.in" "${staging}/${unit}" @ONLY)
  file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system" TYPE FILE FILES "${staging}/${unit}")
endforeach()

configure_file("${TANDEM_SOURCE_DIR}/deploy/tandem.pc.in" "${staging}/tandem.pc" @ONLY)
file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/pkgconfig" TYPE FILE FILES "${staging}/tandem.pc")

if(EXISTS "$ENV{DESTDIR}${TANDEM_SYSCONFDIR}/tandem/tandemd.conf")
  message(STATUS "Keeping: $ENV{DESTDIR}${TANDEM_SYSCONFDIR}/tandem/tandemd.conf")
else()
  file(INSTALL DESTINATION "${TANDEM_SYSCONFDIR}/tandem" TYPE FILE RENAME tandemd.conf
       FILES "${TANDEM_SOURCE_DIR}/deploy/tandemd.conf.example")
endif()
