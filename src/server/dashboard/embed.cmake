# Writes OUT: a C++ source defining the dashboard page (PAGE with STYLE and
# SCRIPT inlined at their markers) as kvtier::server::dashboard_html().
# Run by the build (cmake -P) whenever one of the three files changes.
file(READ "${PAGE}" page)
file(READ "${STYLE}" style)
file(READ "${SCRIPT}" script)
string(REPLACE "/*KVTIER_STYLE*/" "${style}" page "${page}")
string(REPLACE "/*KVTIER_SCRIPT*/" "${script}" page "${page}")
string(FIND "${page}" ")kvtier_page\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "the dashboard page contains the raw-string delimiter )kvtier_page\"")
endif()
file(WRITE "${OUT}.tmp" "// Generated from src/server/dashboard/ by embed.cmake; do not edit.\n#include \"server/dashboard_page.h\"\n\nnamespace kvtier::server {\n\nstd::string_view dashboard_html() {\n  static constexpr char kPage[] = R\"kvtier_page(${page})kvtier_page\";\n  return {kPage, sizeof kPage - 1};\n}\n\n}  // namespace kvtier::server\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
