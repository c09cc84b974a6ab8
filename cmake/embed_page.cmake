# A self-contained web page compiled into the binary: PAGE (HTML) with STYLE
# (CSS) and SCRIPT (JavaScript) inlined at its /*KVTIER_STYLE*/ and
# /*KVTIER_SCRIPT*/ markers, as one C++ function returning a string_view.
# Every page's script is preceded by page_errors.js (reportError and the
# listeners that list the page's own errors in #page-errors, which tests read).
#
# Included from a CMakeLists.txt, it defines
#   kvtier_embed_page(OUTPUT <file.cc> PAGE <html> STYLE <css> SCRIPT <js>
#                     HEADER <include path> NAMESPACE <ns> FUNCTION <name>)
# which adds a build step regenerating OUTPUT whenever a source changes.
# The build step runs this same file with cmake -P (script mode) to write OUTPUT.
if(NOT CMAKE_SCRIPT_MODE_FILE)
  set(KVTIER_EMBED_PAGE_SCRIPT ${CMAKE_CURRENT_LIST_FILE})
  set(KVTIER_PAGE_ERRORS_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/page_errors.js)
  function(kvtier_embed_page)
    cmake_parse_arguments(E "" "OUTPUT;PAGE;STYLE;SCRIPT;HEADER;NAMESPACE;FUNCTION" "" ${ARGN})
    add_custom_command(
      OUTPUT ${E_OUTPUT}
      COMMAND ${CMAKE_COMMAND} -DPAGE=${E_PAGE} -DSTYLE=${E_STYLE} -DSCRIPT=${E_SCRIPT} -DOUT=${E_OUTPUT}
              -DHEADER=${E_HEADER} -DNAMESPACE=${E_NAMESPACE} -DFUNCTION=${E_FUNCTION} -P ${KVTIER_EMBED_PAGE_SCRIPT}
      DEPENDS ${E_PAGE} ${E_STYLE} ${E_SCRIPT} ${KVTIER_EMBED_PAGE_SCRIPT} ${KVTIER_PAGE_ERRORS_SCRIPT}
      COMMENT "Embedding ${E_PAGE}")
  endfunction()
  return()
endif()

file(READ "${PAGE}" page)
file(READ "${STYLE}" style)
file(READ "${CMAKE_CURRENT_LIST_DIR}/page_errors.js" errors)
file(READ "${SCRIPT}" script)
string(PREPEND script "${errors}\n")
string(REPLACE "/*KVTIER_STYLE*/" "${style}" page "${page}")
string(REPLACE "/*KVTIER_SCRIPT*/" "${script}" page "${page}")
string(FIND "${page}" ")kvtier_page\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${PAGE} contains the raw-string delimiter )kvtier_page\"")
endif()
get_filename_component(source_dir "${PAGE}" DIRECTORY)
file(WRITE "${OUT}.tmp" "// Generated from ${source_dir} by cmake/embed_page.cmake; do not edit.\n#include \"${HEADER}\"\n\nnamespace ${NAMESPACE} {\n\nstd::string_view ${FUNCTION}() {\n  static constexpr char kPage[] = R\"kvtier_page(${page})kvtier_page\";\n  return {kPage, sizeof kPage - 1};\n}\n\n}  // namespace ${NAMESPACE}\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
